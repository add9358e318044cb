"""The fuzz target's check, run under hypothesis on every CI run (atheris runs it longer by hand)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz_text_parser import check

# Bytes the format gives meaning to, plus a few it must reject.
_alphabet = st.sampled_from([b"0", b"1", b"5", b"9", b"99", b"999", b"1000", b",", b" ", b"\t", b"\n", b"\r", b"\r\n", b"-", b"+", b"x", b".", b"\x00", b"\xff"])


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(_alphabet, max_size=40).map(b"".join))
def test_reader_agrees_with_reference_on_random_text(data):
    check(data)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 999), max_size=8), max_size=20))
def test_reader_agrees_with_reference_on_mostly_valid_files(sets):
    check("".join(",".join(map(str, s)) + "\n" for s in sets).encode())
