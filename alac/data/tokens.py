"""The text of a data set's entry in its file, for error messages: read back from the file's line
(error paths only)."""

from __future__ import annotations

import re

from alac.data import files
from alac.errors import DataError

TEXT_FORMATS = ("libsvm", "libffm", "criteo")


def token_text(raw):
    return bytes(raw).decode("utf-8", errors="backslashreplace")


def feature_token(line_bytes, position, n_parts):
    """The `position`-th feature token of a line, as the scanner tokenizes it (error path only)."""
    tokens = [t for t in re.split(rb"[ \t\r]+", line_bytes.split(b"#", 1)[0]) if t]
    features = tokens[1:]
    if n_parts == 1 and features and features[0].startswith(b"qid:"):
        features = features[1:]
    return token_text(features[position])


def source_token(source, row, position, field):
    """The file text of the `position`-th entry of `row` (field `field`), or None if unknown."""
    line = source.line_of_row(row)
    if line is None or source.path is None or source.format not in TEXT_FORMATS:
        return None
    try:
        text = files.line_text(source.path, line)
    except DataError:
        return None
    if source.format == "criteo":
        columns = text.split(b"\t")
        return columns[field + 1].decode("utf-8", "backslashreplace") if field + 1 < len(columns) else ""
    return feature_token(text, position, 1 if source.format == "libsvm" else 2)
