"""Writing a generated kernel or device function: its lines at their indentation, the manifest
arguments it declares and the device functions it calls."""


class Writer:
    """The lines and arguments of one generated function as it is written."""

    def __init__(self):
        self.lines = []
        self.args = []
        self.callees = set()
        self.depth = 1
        # params this kernel computes from their optimizer state (async train kernel only: the
        # predict kernel reads the params the runtime wrote after the epoch)
        self.derived = frozenset()

    def arg(self, argument):
        """Declare a manifest.Argument of the function; returns its name in the source."""
        if argument not in self.args:
            assert all(a.name != argument.name for a in self.args), f"two descriptions of {argument.name}"
            self.args.append(argument)
        return argument.name

    def line(self, text=""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def comment(self, text):
        self.line(f"# {text}")

    def call(self, function, **values):
        """Call a functions.DeviceFunction with the caller's variables of its parameters' names (or
        the values given by name); its manifest arguments become this function's own."""
        for argument in function.args:
            self.arg(argument)
        self.callees.add(function.name)
        self.lines += function.call_lines("    " * self.depth, values)
