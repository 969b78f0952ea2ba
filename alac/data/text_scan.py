"""Compiled scanners for the line-oriented text formats (LIBSVM, libffm, Criteo TSV).

The scanners walk a byte buffer once, validate every token against the grammar below and write
CSR arrays or column arrays. They never allocate and never raise: they return an error code and the
byte span of the offending token, and `alac.data.text` turns that into a `DataError` naming the
file, the line and the token. Numbers are converted here when Clinger's fast path is exact
(at most 19 significant digits, mantissa ≤ 2**53, |decimal exponent| ≤ 22); any other number that
matches the grammar is listed as "slow" and converted afterwards by NumPy's correctly rounded parser
in one vectorized call, so every value equals `float(token)` exactly.

Grammar shared by LIBSVM and libffm (bytes, no decoding):
    file      := line ('\n' line)*
    line      := sep* [token (sep+ token)*] sep* ['#' any*]        -- empty lines are skipped
    sep       := ' ' | '\t' | '\r'
    token     := maximal run of bytes other than sep, '\n' and '#'
    number    := [+-]? (digit+ ['.' digit*] | '.' digit+) ([eE] [+-]? digit+)?
    LIBSVM    := label [qid] feature*    label := number; qid := 'qid:' digit+;
                                         feature := digit+ ':' number
    libffm    := label feature*          feature := digit+ ':' digit+ ':' number
"""

import numba
import numpy as np

OK = 0
ERR_MALFORMED = 1
ERR_LABEL = 2
ERR_LABEL_NONFINITE = 3
ERR_VALUE_NONFINITE = 4
ERR_ID_TOO_LARGE = 5
ERR_FIELD_TOO_LARGE = 6
ERR_SLOW_FULL = 7
ERR_VALUE = 8
ERR_ID = 9
ERR_TOO_MANY_COLUMNS = 10
ERR_INTEGER = 11
ERR_CATEGORICAL = 12

# Number statuses.
NUM_FAST = 0
NUM_SLOW = 1
NUM_MALFORMED = 2
NUM_NONFINITE = 3

# Ids and fields are stored as int32, so the largest accepted raw id is the int32 maximum.
MAX_ID = 2**31 - 1

_POW10 = np.array([10.0**i for i in range(23)], dtype=np.float64)
_MAX_EXACT_MANTISSA = 2**53

_SPACE, _TAB, _CR, _LF, _HASH, _COLON = 32, 9, 13, 10, 35, 58


@numba.njit(inline="always")
def _is_sep(c):
    return c == _SPACE or c == _TAB or c == _CR


@numba.njit(inline="always")
def _is_digit(c):
    return 48 <= c <= 57


@numba.njit(inline="always")
def _lower(c):
    if 65 <= c <= 90:
        return c + 32
    return c


@numba.njit
def _is_nonfinite_word(buf, start, end):
    """True for nan, inf, infinity (any case, optional sign): spelled-out non-finite values."""
    if start < end and (buf[start] == 43 or buf[start] == 45):
        start += 1
    n = end - start
    if n == 3:
        a, b, c = _lower(buf[start]), _lower(buf[start + 1]), _lower(buf[start + 2])
        return (a == 110 and b == 97 and c == 110) or (a == 105 and b == 110 and c == 102)
    if n == 8:
        word = (105, 110, 102, 105, 110, 105, 116, 121)  # "infinity"
        for i in range(8):
            if _lower(buf[start + i]) != word[i]:
                return False
        return True
    return False


@numba.njit
def parse_number(buf, start, end):
    """Validate `buf[start:end]` as a number; return (status, value)."""
    i = start
    negative = False
    if i < end and (buf[i] == 43 or buf[i] == 45):
        negative = buf[i] == 45
        i += 1
    mantissa = np.uint64(0)
    significant = 0
    exponent = 0
    digits = 0
    slow = False
    while i < end and _is_digit(buf[i]):
        d = buf[i] - 48
        digits += 1
        if significant < 19:
            mantissa = mantissa * np.uint64(10) + np.uint64(d)
            if mantissa > 0:
                significant += 1
        else:
            slow = True
        i += 1
    if i < end and buf[i] == 46:
        i += 1
        while i < end and _is_digit(buf[i]):
            d = buf[i] - 48
            digits += 1
            if significant < 19:
                mantissa = mantissa * np.uint64(10) + np.uint64(d)
                if mantissa > 0:
                    significant += 1
                exponent -= 1
            else:
                slow = True
            i += 1
    if digits == 0:
        if _is_nonfinite_word(buf, start, end):
            return NUM_NONFINITE, 0.0
        return NUM_MALFORMED, 0.0
    if i < end and (buf[i] == 101 or buf[i] == 69):
        i += 1
        exponent_negative = False
        if i < end and (buf[i] == 43 or buf[i] == 45):
            exponent_negative = buf[i] == 45
            i += 1
        exponent_digits = 0
        written = 0
        while i < end and _is_digit(buf[i]):
            # Saturate: any exponent beyond 10**6 is outside the fast path anyway.
            if written < 1_000_000:
                written = written * 10 + (buf[i] - 48)
            exponent_digits += 1
            i += 1
        if exponent_digits == 0:
            return NUM_MALFORMED, 0.0
        exponent += -written if exponent_negative else written
    if i != end:
        return NUM_MALFORMED, 0.0
    if mantissa == 0 and not slow:
        return NUM_FAST, -0.0 if negative else 0.0
    if slow or mantissa > _MAX_EXACT_MANTISSA or exponent > 22 or exponent < -22:
        return NUM_SLOW, 0.0
    value = np.float64(mantissa)
    if exponent >= 0:
        value = value * _POW10[exponent]
    else:
        value = value / _POW10[-exponent]
    return NUM_FAST, -value if negative else value


@numba.njit
def _parse_unsigned(buf, start, end, limit):
    """Parse digit+ into an int; return (status, value) with status 0 ok, 1 malformed, 2 over limit."""
    if start >= end:
        return 1, 0
    value = 0
    for i in range(start, end):
        c = buf[i]
        if not _is_digit(c):
            return 1, 0
        value = value * 10 + (c - 48)
        if value > limit:
            return 2, 0
    return 0, value


@numba.njit(nogil=True, cache=True)
def scan_sparse_lines(buf, n_parts, labels, indptr, row_line, ids, fields, values,
                      slow_start, slow_end, slow_target):
    """Scan LIBSVM (n_parts=1) or libffm (n_parts=2) lines of `buf` into preallocated arrays.

    Returns (error, error_start, error_end, n_rows, nnz, n_slow, n_lines). `row_line` gets the
    0-based line index of each row within `buf`. A slow number's target is its entry index for a
    value and -(row + 1) for a label.
    """
    n = buf.shape[0]
    pos = 0
    line = 0
    row = 0
    nnz = 0
    n_slow = 0
    slow_capacity = slow_start.shape[0]
    indptr[0] = 0
    while pos < n:
        token_index = 0
        while True:
            while pos < n and _is_sep(buf[pos]):
                pos += 1
            if pos >= n or buf[pos] == _LF:
                break
            if buf[pos] == _HASH:
                while pos < n and buf[pos] != _LF:
                    pos += 1
                break
            start = pos
            first_colon = -1
            second_colon = -1
            colons = 0
            while pos < n:
                c = buf[pos]
                if _is_sep(c) or c == _LF or c == _HASH:
                    break
                if c == _COLON:
                    if colons == 0:
                        first_colon = pos
                    elif colons == 1:
                        second_colon = pos
                    colons += 1
                pos += 1
            end = pos
            if token_index == 0:
                if colons != 0:
                    return ERR_LABEL, start, end, row, nnz, n_slow, line
                status, value = parse_number(buf, start, end)
                if status == NUM_MALFORMED:
                    return ERR_LABEL, start, end, row, nnz, n_slow, line
                if status == NUM_NONFINITE:
                    return ERR_LABEL_NONFINITE, start, end, row, nnz, n_slow, line
                if status == NUM_SLOW:
                    if n_slow >= slow_capacity:
                        return ERR_SLOW_FULL, start, end, row, nnz, n_slow, line
                    slow_start[n_slow] = start
                    slow_end[n_slow] = end
                    slow_target[n_slow] = -(row + 1)
                    n_slow += 1
                    labels[row] = 0.0
                else:
                    label32 = np.float32(value)
                    if not np.isfinite(label32):
                        return ERR_LABEL_NONFINITE, start, end, row, nnz, n_slow, line
                    labels[row] = label32
                token_index += 1
                continue
            if (n_parts == 1 and token_index == 1 and colons == 1 and first_colon - start == 3
                    and buf[start] == 113 and buf[start + 1] == 105 and buf[start + 2] == 100):
                # "qid:<digits>": a ranking group id; alac trains pointwise models, so it is skipped.
                status, _ = _parse_unsigned(buf, first_colon + 1, end, 2**62)
                if status != 0:
                    return ERR_MALFORMED, start, end, row, nnz, n_slow, line
                token_index += 1
                continue
            if colons != n_parts:
                return ERR_MALFORMED, start, end, row, nnz, n_slow, line
            id_start = start
            if n_parts == 2:
                status, field = _parse_unsigned(buf, start, first_colon, MAX_ID)
                if status == 1:
                    return ERR_ID, start, end, row, nnz, n_slow, line
                if status == 2:
                    return ERR_FIELD_TOO_LARGE, start, end, row, nnz, n_slow, line
                fields[nnz] = field
                id_start = first_colon + 1
                value_colon = second_colon
            else:
                value_colon = first_colon
            status, feature = _parse_unsigned(buf, id_start, value_colon, MAX_ID)
            if status == 1:
                return ERR_ID, start, end, row, nnz, n_slow, line
            if status == 2:
                return ERR_ID_TOO_LARGE, start, end, row, nnz, n_slow, line
            ids[nnz] = feature
            status, value = parse_number(buf, value_colon + 1, end)
            if status == NUM_MALFORMED:
                return ERR_VALUE, start, end, row, nnz, n_slow, line
            if status == NUM_NONFINITE:
                return ERR_VALUE_NONFINITE, start, end, row, nnz, n_slow, line
            if status == NUM_SLOW:
                if n_slow >= slow_capacity:
                    return ERR_SLOW_FULL, start, end, row, nnz, n_slow, line
                slow_start[n_slow] = value_colon + 1
                slow_end[n_slow] = end
                slow_target[n_slow] = nnz
                n_slow += 1
                values[nnz] = 0.0
            else:
                value32 = np.float32(value)
                if not np.isfinite(value32):
                    return ERR_VALUE_NONFINITE, start, end, row, nnz, n_slow, line
                values[nnz] = value32
            nnz += 1
            token_index += 1
        if token_index > 0:
            row_line[row] = line
            row += 1
            indptr[row] = nnz
        if pos < n:
            pos += 1
            line += 1
    return OK, 0, 0, row, nnz, n_slow, line + (1 if n > 0 and buf[n - 1] != _LF else 0)


CRITEO_INTEGER_COLUMNS = 13
CRITEO_CATEGORICAL_COLUMNS = 26
CRITEO_COLUMNS = 1 + CRITEO_INTEGER_COLUMNS + CRITEO_CATEGORICAL_COLUMNS
# Integer columns are stored as int64; beyond 10**18 a value cannot be a Criteo count.
_CRITEO_INTEGER_LIMIT = 10**18


@numba.njit
def _hex_digit(c):
    if 48 <= c <= 57:
        return c - 48
    c = _lower(c)
    if 97 <= c <= 102:
        return c - 87
    return -1


@numba.njit(nogil=True, cache=True)
def scan_criteo_lines(buf, labels, integers, integer_present, categoricals, categorical_present,
                      row_line):
    """Scan Criteo TSV lines: label, 13 integer and 26 hexadecimal categorical columns.

    Lines with fewer than 40 columns are padded with empty (missing) columns. Returns
    (error, error_start, error_end, n_rows, n_lines); for a column error, error_start/end span it.
    """
    n = buf.shape[0]
    pos = 0
    line = 0
    row = 0
    while pos < n:
        line_start = pos
        line_end = pos
        while line_end < n and buf[line_end] != _LF:
            line_end += 1
        content_end = line_end
        if content_end > line_start and buf[content_end - 1] == _CR:
            content_end -= 1
        if content_end > line_start:
            column = 0
            start = line_start
            while True:
                end = start
                while end < content_end and buf[end] != _TAB:
                    end += 1
                if column >= CRITEO_COLUMNS:
                    return ERR_TOO_MANY_COLUMNS, start, content_end, row, line
                if column == 0:
                    if end - start != 1 or (buf[start] != 48 and buf[start] != 49):
                        return ERR_LABEL, start, end, row, line
                    labels[row] = buf[start] - 48
                elif column <= CRITEO_INTEGER_COLUMNS:
                    j = column - 1
                    if end == start:
                        integer_present[row, j] = False
                        integers[row, j] = 0
                    else:
                        digits_start = start
                        negative = buf[start] == 45
                        if negative:
                            digits_start += 1
                        status, value = _parse_unsigned(buf, digits_start, end, _CRITEO_INTEGER_LIMIT)
                        if status != 0:
                            return ERR_INTEGER, start, end, row, line
                        integer_present[row, j] = True
                        integers[row, j] = -value if negative else value
                else:
                    j = column - 1 - CRITEO_INTEGER_COLUMNS
                    if end == start:
                        categorical_present[row, j] = False
                        categoricals[row, j] = 0
                    else:
                        if end - start > 16:
                            return ERR_CATEGORICAL, start, end, row, line
                        value = np.uint64(0)
                        for i in range(start, end):
                            d = _hex_digit(buf[i])
                            if d < 0:
                                return ERR_CATEGORICAL, start, end, row, line
                            value = value * np.uint64(16) + np.uint64(d)
                        categorical_present[row, j] = True
                        categoricals[row, j] = value
                column += 1
                if end >= content_end:
                    break
                start = end + 1
            for c in range(column, CRITEO_COLUMNS):
                if c <= CRITEO_INTEGER_COLUMNS:
                    integer_present[row, c - 1] = False
                    integers[row, c - 1] = 0
                else:
                    categorical_present[row, c - 1 - CRITEO_INTEGER_COLUMNS] = False
                    categoricals[row, c - 1 - CRITEO_INTEGER_COLUMNS] = 0
            row_line[row] = line
            row += 1
        pos = line_end + 1
        if line_end < n:
            line += 1
    return OK, 0, 0, row, line + (1 if n > 0 and buf[n - 1] != _LF else 0)
