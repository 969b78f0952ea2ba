"""Writing a generated kernel: its lines at their indentation, and the manifest arguments it declares."""


class Writer:
    """The lines and arguments of one generated kernel as it is written."""

    def __init__(self):
        self.lines = []
        self.args = []
        self.depth = 1
        # params this kernel computes from their optimizer state (async train kernel only: the
        # predict kernel reads the params the runtime wrote after the epoch)
        self.derived = frozenset()
        # one-tile code: the chunk's edges are loaded once, with the params already gathered
        self.one_tile = False
        self.tile_loaded = False
        self.loaded_params = set()
        # persistent kernels sum the loss per row in registers and add it to the total once, at the end
        self.loss_rows = False

    def arg(self, argument):
        """Declare a manifest.Argument of the kernel; returns its name in the source."""
        if argument not in self.args:
            assert all(a.name != argument.name for a in self.args), f"two descriptions of {argument.name}"
            self.args.append(argument)
        return argument.name

    def line(self, text=""):
        self.lines.append(("    " * self.depth + text) if text else "")

    def comment(self, text):
        self.line(f"# {text}")
