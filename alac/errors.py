"""The exceptions alac raises for bad input.

Every error a user can cause by handing alac a bad file, array or model is one of these, with a
message that says where the problem is (file, 1-based line, offending token or expression), so
callers can catch one type and show the message as it is.
"""


class AlacError(Exception):
    """Base class of every error alac raises on purpose."""


class DataError(AlacError, ValueError):
    """Input data that alac cannot use: a malformed file, a bad value, inconsistent feature spaces."""

    def __init__(self, message, *, path=None, line=None, token=None):
        self.path = None if path is None else str(path)
        self.line = line
        self.token = token
        where = []
        if self.path is not None:
            where.append(self.path)
        if line is not None:
            where.append(f"line {line}")
        prefix = ": ".join(where)
        text = f"{prefix}: {message}" if prefix else message
        if token is not None:
            text += f" (token {token!r})"
        super().__init__(text)


class ModelError(AlacError, ValueError):
    """A model declaration that cannot be compiled: an unknown op, inconsistent shapes, a wrong apply."""
