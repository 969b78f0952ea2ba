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
            text += f" (token {shorten(token)})"
        super().__init__(text)


# Tokens longer than this are cut in messages (a 10 MB token must not be echoed whole).
TOKEN_CHARACTERS = 40


def shorten(token):
    """repr of a token, cut to its first TOKEN_CHARACTERS characters and its length when longer."""
    if len(token) <= TOKEN_CHARACTERS:
        return repr(token)
    return f"{token[:TOKEN_CHARACTERS]!r}... ({len(token):,} characters)"


class ModelError(AlacError, ValueError):
    """A model declaration that cannot be compiled: an unknown op, inconsistent shapes, a wrong apply."""


class OptionError(AlacError, ValueError):
    """An option or argument out of its range: a plan, a trainer setting, a loader option."""
