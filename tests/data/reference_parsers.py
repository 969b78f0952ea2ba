"""Independent, deliberately simple pure-Python parsers: the oracle for the fuzz tests.

They follow the grammar documented in alac.data.text_scan and alac.data.criteo line by line with
regular expressions and float(), sharing no code with the compiled scanners.
"""

import re

import numpy as np

NUMBER = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
DIGITS = re.compile(rb"\d+")
MAX_ID = 2**31 - 1


class ReferenceError_(Exception):
    pass


def _number(token):
    if not NUMBER.fullmatch(token):
        raise ReferenceError_(token)
    with np.errstate(over="ignore"):
        value = np.float32(float(token))
    if not np.isfinite(value):
        raise ReferenceError_(token)
    return value


def _unsigned(token, limit):
    if not DIGITS.fullmatch(token) or int(token) > limit:
        raise ReferenceError_(token)
    return int(token)


def parse_sparse(data, n_parts, zero_based="auto", n_features=None):
    """Returns dict(indptr, ids, fields, values, labels, n_features, n_fields) or raises."""
    labels, indptr, ids, fields, values = [], [0], [], [], []
    for line in data.split(b"\n"):
        tokens = [t for t in re.split(rb"[ \t\r]+", line.split(b"#", 1)[0]) if t]
        if not tokens:
            continue
        if b":" in tokens[0]:
            raise ReferenceError_(tokens[0])
        labels.append(_number(tokens[0]))
        features = tokens[1:]
        if n_parts == 1 and features and features[0].startswith(b"qid:"):
            _unsigned(features[0][4:], 2**62)
            features = features[1:]
        for token in features:
            parts = token.split(b":")
            if len(parts) != n_parts + 1:
                raise ReferenceError_(token)
            if n_parts == 2:
                fields.append(_unsigned(parts[0], MAX_ID))
            ids.append(_unsigned(parts[-2], MAX_ID))
            values.append(_number(parts[-1]))
        indptr.append(len(ids))
    if not labels:
        raise ReferenceError_(b"empty")
    base = (0 if 0 in ids else 1) if zero_based == "auto" else (0 if zero_based else 1)
    if base == 1 and 0 in ids:
        raise ReferenceError_(b"below base")
    ids = [i - base for i in ids]
    if n_features is None:
        n_features = max(ids) + 1 if ids else 0
    elif any(i >= n_features for i in ids):
        raise ReferenceError_(b"beyond n_features")
    return dict(indptr=np.array(indptr, np.int64), ids=np.array(ids, np.int32),
                fields=np.array(fields, np.int32) if n_parts == 2 else None,
                values=np.array(values, np.float32), labels=np.array(labels, np.float32),
                n_features=n_features, n_fields=(max(fields) + 1 if fields else 0) if n_parts == 2 else 0)


def parse_criteo(data):
    """Returns dict of raw Criteo columns or raises."""
    rows = []
    for line in data.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            continue
        columns = line.split(b"\t")
        if len(columns) > 40:
            raise ReferenceError_(line)
        columns += [b""] * (40 - len(columns))
        if columns[0] not in (b"0", b"1"):
            raise ReferenceError_(columns[0])
        integers = []
        for text in columns[1:14]:
            if text and (not re.fullmatch(rb"-?\d+", text) or abs(int(text)) > 10**18):
                raise ReferenceError_(text)
            integers.append((int(text), True) if text else (0, False))
        categoricals = []
        for text in columns[14:]:
            if text and not re.fullmatch(rb"[0-9a-fA-F]{1,16}", text):
                raise ReferenceError_(text)
            categoricals.append((int(text, 16), True) if text else (0, False))
        rows.append((int(columns[0]), integers, categoricals))
    if not rows:
        raise ReferenceError_(b"empty")
    return dict(
        labels=np.array([r[0] for r in rows], np.float32),
        integers=np.array([[v for v, _ in r[1]] for r in rows], np.int64),
        integer_present=np.array([[p for _, p in r[1]] for r in rows], bool),
        categoricals=np.array([[v for v, _ in r[2]] for r in rows], np.uint64),
        categorical_present=np.array([[p for _, p in r[2]] for r in rows], bool))
