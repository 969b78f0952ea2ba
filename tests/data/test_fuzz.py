"""Property-based fuzzing of the text loaders against the independent reference parsers.

Every input, random bytes or mutated valid lines, must either raise alac.DataError (and then the
reference rejects it too) or give exactly the reference's arrays; no other exception may escape.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alac import DataError
from alac.data.criteo import parse_criteo_bytes
from alac.data.libsvm import parse_bytes
from tests.data.reference_parsers import ReferenceError_, parse_criteo, parse_sparse

FUZZ = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Bytes that matter to the grammars, so mutations hit the interesting paths often.
INTERESTING = list(b"0123456789:.-+eE #\t\r\nqidnaNINFxX\x00\xff\xc3abcdef")

numbers = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.builds(lambda m, e: f"{m}e{e}", st.integers(-999, 999), st.integers(-60, 60)),
    st.sampled_from(["1", "0", "-1", "+1", ".5", "5.", "0.30000000000000004", "1e-45", "3.4e38",
                     "123456789012345678901234567890", "0.000000000000000000000001"]),
)


def _sparse_line(n_parts):
    feature_id = st.integers(0, 300).map(str)
    token = st.builds(lambda f, i, v: (f"{f}:" if n_parts == 2 else "") + f"{i}:{v}",
                      st.integers(0, 5), feature_id, numbers)
    separator = st.sampled_from([" ", "  ", "\t", " \t"])
    return st.builds(
        lambda label, qid, tokens, sep, end, comment: label + (f" qid:{qid}" if qid is not None else "")
        + "".join(sep + t for t in tokens) + comment + end,
        numbers, st.none() if n_parts == 2 else st.one_of(st.none(), st.integers(0, 99)),
        st.lists(token, max_size=8), separator, st.sampled_from(["\n", "\r\n", " \n"]),
        st.sampled_from(["", " # comment", "#x"]))


def _mutated(lines):
    @st.composite
    def build(draw):
        data = bytearray("".join(draw(st.lists(lines, min_size=1, max_size=6))).encode())
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["insert", "delete", "replace"]))
            position = draw(st.integers(0, len(data)))
            byte = draw(st.sampled_from(INTERESTING))
            if kind == "insert":
                data.insert(position, byte)
            elif position < len(data):
                if kind == "delete":
                    del data[position]
                else:
                    data[position] = byte
        return bytes(data)

    return build()


def _check_sparse(data, format, n_parts, zero_based="auto"):
    try:
        expected = parse_sparse(data, n_parts, zero_based)
    except ReferenceError_:
        expected = None
    try:
        dataset = parse_bytes(data, format=format, zero_based=zero_based)
    except DataError:
        assert expected is None, f"alac rejected input the reference accepts: {data!r}"
        return
    assert expected is not None, f"alac accepted input the reference rejects: {data!r}"
    assert dataset.n_features == expected["n_features"]
    np.testing.assert_array_equal(dataset.indptr.numpy(), expected["indptr"])
    np.testing.assert_array_equal(dataset.indices.numpy(), expected["ids"])
    np.testing.assert_array_equal(dataset.values_or_ones().numpy(), expected["values"])
    np.testing.assert_array_equal(dataset.labels.numpy(), expected["labels"])
    if n_parts == 2:
        np.testing.assert_array_equal(dataset.fields.numpy(), expected["fields"])
        assert dataset.n_fields == expected["n_fields"]


@FUZZ
@given(st.binary(max_size=200))
def test_libsvm_random_bytes(data):
    _check_sparse(data, "libsvm", 1)


# half FUZZ's examples: mutated lines are slower to draw than random bytes (CI's 15 s a test)
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(_sparse_line(1)), st.sampled_from(["auto", True, False]))
def test_libsvm_mutated_lines(data, zero_based):
    _check_sparse(data, "libsvm", 1, zero_based)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=200), _mutated(_sparse_line(2))))
def test_libffm_fuzz(data):
    _check_sparse(data, "libffm", 2, zero_based=True)


def _criteo_line():
    integer = st.one_of(st.just(""), st.integers(-5, 10**9).map(str))
    categorical = st.one_of(st.just(""), st.integers(0, 2**32 - 1).map(lambda v: f"{v:08x}"))
    return st.builds(lambda label, ints, cats, width, end: "\t".join(
        ([label] + ints + cats)[:width]) + end, st.sampled_from(["0", "1"]),
        st.lists(integer, min_size=13, max_size=13), st.lists(categorical, min_size=26, max_size=26),
        st.integers(1, 40), st.sampled_from(["\n", "\r\n"]))


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.binary(max_size=200), _mutated(_criteo_line())))
def test_criteo_fuzz(data):
    try:
        expected = parse_criteo(data)
    except ReferenceError_:
        expected = None
    try:
        columns = parse_criteo_bytes(data)
    except DataError:
        assert expected is None, f"alac rejected input the reference accepts: {data!r}"
        return
    assert expected is not None, f"alac accepted input the reference rejects: {data!r}"
    for name, array in expected.items():
        np.testing.assert_array_equal(getattr(columns, name), array, err_msg=name)


@pytest.mark.parametrize("token", [b"0.30000000000000004", b"1e-45", b"3.4028234e38", b"-0",
                                   b"123456789012345678901234567890", b"4.9e-324", b"1.00000005960464477539"])
def test_numbers_equal_python_float(token):
    dataset = parse_bytes(b"1 1:" + token + b"\n")
    assert dataset.values_or_ones()[0].item() == np.float32(float(token))
