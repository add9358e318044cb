"""The text format (settopk.shards.inputs.text): every rule of a line, every bad line located, and the
vectorised parser agreeing with the line-by-line checker."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from settopk.shards.inputs import InputError, SetLimits, read_corpus, read_queries
from settopk.shards.inputs import text as inputs_text
from tests.input_helpers import assert_error, write, write_parquet

LIMITS = SetLimits()


def corpus_text(tmp_path, data, limits=LIMITS, **kw):
    return read_corpus(write(tmp_path / "docs.txt", data), limits, **kw)


def test_text_corpus_reads_sets_sorted_with_ids(tmp_path):
    corpus = corpus_text(tmp_path, "3,1,2\n\n5\n7,7,6\n")
    assert corpus.fmt == "text" and corpus.files == (str(tmp_path / "docs.txt"),)
    assert corpus.doc_ids.dtype == np.int64 and corpus.doc_ids.tolist() == [0, 1, 2, 3]
    assert corpus.docs.to_lists() == [[1, 2, 3], [], [5], [6, 7]]
    assert corpus.docs.tokens.dtype == np.uint16
    assert corpus.n_with_repeats == 1


@pytest.mark.parametrize(
    "data, sets",
    [
        ("", []),
        ("\n", [[]]),
        ("1\n2\n", [[1], [2]]),
        ("1\n2", [[1], [2]]),  # no final newline
        ("1\n\n", [[1], []]),  # the empty line is a doc; the final newline is not
        ("\n\n1", [[], [], [1]]),
        ("1,2\r\n\r\n3\r\n", [[1, 2], [], [3]]),  # CRLF, including an empty CRLF line
        ("1,2\r", [[1, 2]]),  # CR at end of file ends the line too
        (" 1 ,\t2 \n \t\n", [[1, 2], []]),  # whitespace around ids; whitespace-only line = empty set
        ("007,0\n", [[0, 7]]),  # leading zeros are plain decimals
        ("65535,0\n", [[0, 65535]]),
        ("2,2,2,1,1\n", [[1, 2]]),
    ],
)
def test_text_corpus_line_rules(tmp_path, data, sets):
    corpus = corpus_text(tmp_path, data)
    assert corpus.docs.to_lists() == sets
    assert corpus.doc_ids.tolist() == list(range(len(sets)))


def test_text_corpus_repeats_counted_per_set(tmp_path):
    corpus = corpus_text(tmp_path, "1,1,2\n2,2\n3\n4,5,4,5\n")
    assert corpus.n_with_repeats == 3
    assert corpus.docs.to_lists() == [[1, 2], [2], [3], [4, 5]]


def test_text_corpus_length_range_filters_deduplicated_lengths(tmp_path):
    data = "\n".join(",".join(str(i) for i in range(n)) for n in range(6)) + "\n9,9,9,8\n"
    corpus = corpus_text(tmp_path, data, length_range=(2, 3))
    assert corpus.doc_ids.tolist() == [2, 3, 6]  # line 6 has 2 distinct ids
    assert corpus.docs.to_lists() == [[0, 1], [0, 1, 2], [8, 9]]
    assert corpus.n_with_repeats == 1
    assert corpus_text(tmp_path, data, length_range=(0, 0)).doc_ids.tolist() == [0]


def test_text_corpus_length_range_still_validates_every_line(tmp_path):
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, "1\n1,2,3\n1,x\n", length_range=(3, 3))
    assert_error(excinfo, tmp_path / "docs.txt", "'x'", line=3)


def test_text_corpus_across_small_blocks_matches_one_block(tmp_path, monkeypatch):
    rng = np.random.default_rng(1)
    lines = []
    for n in rng.integers(0, 40, size=300):
        ids = [str(int(x)) for x in rng.integers(0, 65536, size=n)]
        lines.append(" , ".join(ids) if n % 3 == 0 else ",".join(ids))
    data = "\r\n".join(lines)
    whole = corpus_text(tmp_path, data)
    monkeypatch.setattr(inputs_text, "_BLOCK_BYTES", 16)  # lines longer than a block make it grow
    small = corpus_text(tmp_path, data)
    assert small.docs.to_lists() == whole.docs.to_lists()
    assert small.doc_ids.tolist() == list(range(300))
    assert whole.docs.to_lists() == [sorted({int(x) for x in line.split(",") if x.strip()}) for line in lines]


def test_text_corpus_line_longer_than_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs_text, "_BLOCK_BYTES", 16)
    monkeypatch.setattr(inputs_text, "_MAX_LINE_BYTES", 64)
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, "1\n2\n" + "3," * 100 + "3\n")
    assert_error(excinfo, tmp_path / "docs.txt", "longer line", line=3)


BAD_TEXT = [
    ("1,2\n1,,2\n", 2, "an empty field at id #2"),
    ("1,2,\n", 1, "an empty field at id #3"),
    (",1\n", 1, "an empty field at id #1"),
    (" , \n", 1, "an empty field"),
    ("1\n1.5\n", 2, "'1.5'"),
    ("abc\n", 1, "'abc'"),
    ("1,--3\n", 1, "'--3' at id #2"),
    ("1,3-\n", 1, "'3-' at id #2"),
    ("+3\n", 1, "'+3'"),
    ("0x1F\n", 1, "'0x1F'"),  # Arrow's cast would read this as hex
    ("1 2\n", 1, "'1 2'"),
    ("0,18446744073709551616\n", 1, "18446744073709551616 at id #2"),  # 2**64: no 64-bit integer
    ("-9223372036854775809\n", 1, "-9223372036854775809 at id #1"),  # -2**63 - 1
    ("99999999999999999999999\n", 1, "99999999999999999999999"),
    ("1\n2\r3\n", 2, "carriage return"),
    ("1\r\r\n", 1, "carriage return"),
    ("1,\x1f2\n", 1, "'\\x1f2'"),
    ("1\x002\n", 1, "at id #1"),
    ("1,\xe9\n", 1, "'é'"),
    ("\xff\xfe1\n", 1, "at id #1"),
    ("1\n" + ",".join(str(i) for i in range(129)) + "\n", 2, "129 distinct ids"),
]


@pytest.mark.parametrize("data, line, reason", BAD_TEXT)
def test_text_corpus_bad_line(tmp_path, data, line, reason):
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, data.encode("latin-1") if "\xff" in data else data)
    assert_error(excinfo, tmp_path / "docs.txt", reason, line=line)


def test_text_corpus_vocab_and_max_len_limits(tmp_path):
    limits = SetLimits(vocab_size=100, max_len=3)
    assert corpus_text(tmp_path, "99,0,1\n", limits).docs.to_lists() == [[0, 1, 99]]
    assert corpus_text(tmp_path, "1,2,3,3,2,1\n", limits).docs.to_lists() == [[1, 2, 3]]  # 3 distinct
    # An id outside [0, vocab_size) is read as a token value, mapped to a dense id by the job.
    wide = corpus_text(tmp_path, "99\n0,100,-1\n", limits).docs
    assert type(wide).__name__ == "WideSets" and wide.to_lists() == [[99], [-1, 0, 100]]
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, "1,2\n1,2,3,4,4\n", limits)
    assert_error(excinfo, tmp_path / "docs.txt", "at most 3 distinct ids", "4 distinct ids", line=2)


def test_text_corpus_first_bad_line_deep_in_a_large_block(tmp_path):
    good = "\n".join(f"{i % 65536},{(i * 7) % 65536}" for i in range(20_000))
    data = f"{good}\n1,2\n{good}\n1,x\n{good}\n1,y\n"
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, data)
    assert_error(excinfo, tmp_path / "docs.txt", "'x'", line=40_002)


def test_text_corpus_bad_line_in_a_later_block(tmp_path, monkeypatch):
    monkeypatch.setattr(inputs_text, "_BLOCK_BYTES", 64)
    data = "".join(f"{i},{i + 1}\n" for i in range(500)) + "5,,6\n"
    with pytest.raises(InputError) as excinfo:
        corpus_text(tmp_path, data)
    assert_error(excinfo, tmp_path / "docs.txt", "empty field", line=501)


def test_text_corpus_parquet_without_suffix_gets_a_hint(tmp_path):
    write_parquet(tmp_path / "docs.bin", {"doc_id": [0], "tokens": [[1]]})
    with pytest.raises(InputError) as excinfo:
        read_corpus(tmp_path / "docs.bin", LIMITS)
    assert_error(excinfo, tmp_path / "docs.bin", ".parquet suffix", line=1)


def test_query_text_file(tmp_path):
    path = write(tmp_path / "queries.txt", "3,1\n\n2,2\r\n7")
    queries = read_queries(path, LIMITS)
    assert queries.fmt == "text" and queries.files == (str(path),)
    assert queries.query_ids == ["0", "1", "2", "3"]
    assert queries.queries.to_lists() == [[1, 3], [], [2], [7]]
    assert queries.n_with_repeats == 1
    write(path, "1\n2\n3,-1x\n")
    with pytest.raises(InputError) as excinfo:
        read_queries(path, LIMITS)
    assert_error(excinfo, path, "'-1x'", line=3)


# --------------------------------------------------------------------------------------------------
# Properties

id_lists = st.lists(st.lists(st.integers(0, 65535), max_size=12).map(lambda s: s + s[: len(s) // 3]), max_size=30)


@settings(max_examples=150, deadline=None)
@given(
    sets=id_lists,
    spaces=st.lists(st.sampled_from(["", " ", "\t", "  \t"]), min_size=1),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    block=st.sampled_from([8, 64, 1 << 20]),
    data=st.data(),
)
def test_property_text_round_trip(sets, spaces, crlf, final_newline, block, data):
    shuffled = [data.draw(st.permutations(s)) for s in sets]
    pad = lambda i: spaces[i % len(spaces)]  # noqa: E731
    lines = [",".join(f"{pad(i)}{x}{pad(i + 1)}" for i, x in enumerate(s)) for s in shuffled]
    newline = "\r\n" if crlf else "\n"
    # A final newline is optional, except after a last empty line (the empty line would vanish).
    text = newline.join(lines) + (newline if lines and (final_newline or lines[-1] == "") else "")
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs_text, "_BLOCK_BYTES", block)
        path = os.path.join(tmp, "docs.txt")
        with open(path, "w", newline="") as f:
            f.write(text)
        corpus = read_corpus(path, LIMITS)
    assert corpus.docs.to_lists() == [sorted(set(s)) for s in sets]
    assert corpus.doc_ids.tolist() == list(range(len(sets)))
    assert corpus.n_with_repeats == sum(len(set(s)) < len(s) for s in sets)


def reference_read(text: bytes, limits: SetLimits):
    """Line-by-line reading of the text format: (sets, None) or (None, 1-based bad line)."""
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    sets = []
    for number, line in enumerate(lines, start=1):
        if inputs_text.check_line(line, limits) is not None:
            return None, number
        line = line[:-1] if line.endswith(b"\r") else line
        sets.append(sorted({int(x) for x in line.split(b",") if x.strip(b" \t")}))
    return sets, None


@settings(max_examples=300, deadline=None)
@given(
    text=st.lists(st.sampled_from(["1", "2", "7", "9", "0", ",", " ", "\t", "\r", "\n", "-", "x", "\x00", "."]), max_size=60).map("".join),
    block=st.sampled_from([4, 32, 1 << 20]),
)
def test_property_vectorised_parser_agrees_with_line_checker(text, block):
    limits = SetLimits(vocab_size=80, max_len=3)
    expected_sets, expected_line = reference_read(text.encode(), limits)
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(inputs_text, "_BLOCK_BYTES", block)
        mp.setattr(inputs_text, "_SMALL_SLICE_LINES", 2)
        path = os.path.join(tmp, "docs.txt")
        with open(path, "wb") as f:
            f.write(text.encode())
        if expected_line is None:
            assert read_corpus(path, limits).docs.to_lists() == expected_sets
        else:
            with pytest.raises(InputError) as excinfo:
                read_corpus(path, limits)
            assert excinfo.value.line == expected_line
