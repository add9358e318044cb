"""Reading the corpus in pieces (settopk.shards.inputs.pieces) gives exactly what one pass of ``read_corpus``
gives: the same docs, the same first error, the same rows set aside."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.shards.inputs import (
    InputError,
    PieceSummary,
    assemble_shard,
    check_doc_ids,
    pieces_ordered,
    plan_pieces,
    read_corpus,
    read_piece,
)
from tests.piece_helpers import LIMITS, MAX_LEN, ordered_dir, repeated_across_pieces  # noqa: F401 (fixtures)
from tests.piece_helpers import assert_same_docs as _assert_same_docs
from tests.piece_helpers import random_sets as _random_sets
from tests.piece_helpers import write_parquet as _write_parquet
from tests.piece_helpers import read_all as _read_all


def _no_fetch(index):
    raise AssertionError(f"ids of piece {index} fetched although the pieces' id ranges do not overlap")


def test_plan_pieces_groups_whole_row_groups_in_file_order(ordered_dir):
    a, b = os.path.join(ordered_dir, "a.parquet"), os.path.join(ordered_dir, "b.parquet")
    pieces, fmt, files = plan_pieces(ordered_dir, 5)
    assert fmt == "parquet" and files == (a, b)
    assert [(p.index, p.path, p.row_groups, p.n_rows) for p in pieces] == [
        (0, a, (0, 1), 6),
        (1, a, (2, 3), 4),  # the file's last group closes the piece even below the target
        (2, b, (0, 1, 2), 6),
        (3, b, (3,), 1),
    ]
    for p in pieces:
        st = os.stat(p.path)
        assert p.fmt == "parquet" and (p.size_bytes, p.mtime_ns) == (st.st_size, st.st_mtime_ns)
    one_each = plan_pieces(ordered_dir, 1)[0]
    assert [(p.path, p.row_groups) for p in one_each] == [(a, (g,)) for g in range(4)] + [(b, (g,)) for g in range(4)]
    whole_files = plan_pieces(ordered_dir, 10**9)[0]
    assert [(p.index, p.path, p.row_groups, p.n_rows) for p in whole_files] == [(0, a, (0, 1, 2, 3), 10), (1, b, (0, 1, 2, 3), 7)]
    with pytest.raises(ValueError, match="target_rows"):
        plan_pieces(ordered_dir, 0)


def test_plan_pieces_text_corpus_and_empty_parquet_file(tmp_path):
    text = tmp_path / "docs.txt"
    text.write_text("1,2\n3\n")
    pieces, fmt, files = plan_pieces(str(text), 1)
    assert fmt == "text" and files == (str(text),)
    assert [(p.index, p.row_groups, p.n_rows) for p in pieces] == [(0, None, -1)]
    summary, corpus = read_piece(pieces[0], LIMITS)
    assert corpus.doc_ids.tolist() == [0, 1] and summary.length_counts.tolist()[:3] == [0, 1, 1]

    schema = pa.schema([("doc_id", pa.int64()), ("tokens", pa.list_(pa.int32()))])
    pq.ParquetWriter(tmp_path / "none.parquet", schema).close()  # no row group at all
    pieces, _, _ = plan_pieces(str(tmp_path / "none.parquet"), 4)
    assert [(p.row_groups, p.n_rows) for p in pieces] == [((), 0)]
    summary, corpus = read_piece(pieces[0], LIMITS)
    assert (summary.n_docs, summary.id_min, summary.id_max, corpus.docs.n_sets) == (0, -1, -1, 0)
    assert pieces_ordered([summary])


@pytest.mark.parametrize("target_rows", [1, 4, 5, 100])
def test_pieces_assemble_to_the_corpus_read_in_one_pass(ordered_dir, target_rows):
    pieces, summaries, corpora = _read_all(ordered_dir, target_rows)
    whole = read_corpus(ordered_dir, LIMITS)
    assert [s.index for s in summaries] == [p.index for p in pieces]
    assert pieces_ordered(summaries)
    assert check_doc_ids(pieces, summaries, _no_fetch, "error") == ({}, [])
    _assert_same_docs(*assemble_shard(0, MAX_LEN, corpora), whole)
    assert np.concatenate([c.source_rows for c in corpora]).tolist() == whole.source_rows.tolist()
    assert sum(s.n_with_repeats for s in summaries) == whole.n_with_repeats > 0
    assert sum(s.n_docs for s in summaries) == whole.docs.n_sets
    assert sum(s.n_tokens for s in summaries) == len(whole.docs.tokens)
    assert np.sum([s.length_counts for s in summaries], axis=0).tolist() == np.bincount(whole.docs.lengths, minlength=MAX_LEN + 1).tolist()
    for s, c in zip(summaries, corpora):
        assert (s.id_min, s.id_max) == (c.doc_ids[0], c.doc_ids[-1])
    for lo, hi in [(0, 0), (2, 4), (MAX_LEN, MAX_LEN), (3, 3)]:
        _assert_same_docs(*assemble_shard(lo, hi, corpora), read_corpus(ordered_dir, LIMITS, length_range=(lo, hi)))
    # Shards of a plan together hold every doc exactly once.
    parts = [assemble_shard(lo, hi, corpora)[0] for lo, hi in [(0, 1), (2, 5), (6, MAX_LEN)]]
    assert sorted(np.concatenate(parts).tolist()) == whole.doc_ids.tolist()


def test_assemble_shard_of_no_pieces_and_of_an_empty_range(ordered_dir):
    doc_ids, docs = assemble_shard(0, MAX_LEN, [])
    assert doc_ids.tolist() == [] and docs.n_sets == 0 and docs.tokens.dtype == np.uint16
    _, _, corpora = _read_all(ordered_dir, 4)
    lengths = np.concatenate([c.docs.lengths for c in corpora])
    missing = next(n for n in range(MAX_LEN + 1) if n not in set(lengths.tolist()))
    doc_ids, docs = assemble_shard(missing, missing, corpora)
    assert doc_ids.tolist() == [] and docs.n_sets == 0


@pytest.mark.parametrize(
    "bad_row, tokens, doc_id, found",
    [
        (10, [1, None], None, "a null at id #2"),  # a null token
        (9, list(range(MAX_LEN + 1)), None, f"{MAX_LEN + 1} distinct ids"),  # too long
        (11, [1], -4, "-4"),  # negative doc id
        (7, None, None, "null"),  # a null set
    ],
)
def test_bad_row_in_a_later_row_group_is_numbered_within_the_whole_file(tmp_path, bad_row, tokens, doc_id, found):
    rng = np.random.default_rng(1)
    sets = _random_sets(rng, 12)
    ids = list(range(12))
    sets[bad_row] = tokens
    if doc_id is not None:
        ids[bad_row] = doc_id
    path = _write_parquet(tmp_path / "docs.parquet", ids, sets, 3)  # groups of rows 0-2, 3-5, 6-8, 9-11
    with pytest.raises(InputError) as whole:
        read_corpus(path, LIMITS)
    assert whole.value.row == bad_row and found in str(whole.value)
    pieces, _, _ = plan_pieces(path, 3)
    holder = bad_row // 3
    for p in pieces:
        if p.index != holder:
            read_piece(p, LIMITS)  # the other pieces are fine
    with pytest.raises(InputError) as piece:
        read_piece(pieces[holder], LIMITS)
    assert str(piece.value) == str(whole.value) and piece.value.row == bad_row
    # Quarantine sets the same row aside, with the same record.
    summary, corpus = read_piece(pieces[holder], LIMITS, "quarantine")
    assert summary.rejected == read_corpus(path, LIMITS, on_invalid="quarantine").rejected
    assert summary.n_docs == corpus.docs.n_sets == 2 and bad_row not in corpus.source_rows.tolist()


def test_pieces_out_of_id_order_are_sorted_when_assembled(tmp_path):
    rng = np.random.default_rng(2)
    sets = _random_sets(rng, 40)
    ids = np.arange(40)[::-1] * 3 + 5  # descending, sparse
    root = tmp_path / "docs"
    root.mkdir()
    _write_parquet(root / "part-0.parquet", ids[:25], sets[:25], 4)
    _write_parquet(root / "part-1.parquet", ids[25:], sets[25:], 4)
    whole = read_corpus(str(root), LIMITS)
    assert whole.doc_ids.tolist() == sorted(ids.tolist())
    pieces, summaries, corpora = _read_all(str(root), 6)
    assert len(pieces) > 2 and not pieces_ordered(summaries)
    fetched = []

    def fetch_ids(index):
        fetched.append(index)
        return corpora[index].doc_ids, corpora[index].source_rows

    assert check_doc_ids(pieces, summaries, fetch_ids, "error") == ({}, [])  # unordered, but no id repeats
    assert sorted(fetched) == [s.index for s in summaries if s.n_docs]
    _assert_same_docs(*assemble_shard(0, MAX_LEN, corpora, ordered=False), whole)
    _assert_same_docs(*assemble_shard(2, 5, corpora, ordered=False), read_corpus(str(root), LIMITS, length_range=(2, 5)))


def test_pieces_ordered_needs_strictly_increasing_id_ranges():
    def summary(index, lo, hi, n=1):
        return PieceSummary(index, np.zeros(MAX_LEN + 1, np.int64), n, 0, lo, hi, 0, ())

    assert pieces_ordered([])
    assert pieces_ordered([summary(0, 0, 4), summary(1, -1, -1, n=0), summary(2, 5, 9)])  # empty pieces skipped
    assert not pieces_ordered([summary(0, 0, 4), summary(1, 4, 9)])  # the same id at a boundary
    assert not pieces_ordered([summary(0, 0, 4), summary(1, -1, -1, n=0), summary(2, 3, 9)])  # overlapping ranges


def test_doc_id_repeated_across_pieces_is_an_error_naming_both_rows(repeated_across_pieces):
    path, pieces, summaries, _, fetch_ids = repeated_across_pieces
    with pytest.raises(InputError) as err:
        check_doc_ids(pieces, summaries, fetch_ids, "error")
    assert err.value.path == path and err.value.row == 4  # the first repeat in read order
    assert f"doc_id 7 again (first at {path} row 1)" in str(err.value)
    with pytest.raises(InputError) as whole:
        read_corpus(path, LIMITS)
    assert str(err.value) == str(whole.value)


def test_doc_id_repeated_across_pieces_is_set_aside_under_quarantine(repeated_across_pieces):
    path, pieces, summaries, corpora, fetch_ids = repeated_across_pieces
    drops, rejected = check_doc_ids(pieces, summaries, fetch_ids, "quarantine")
    assert {i: v.tolist() for i, v in drops.items()} == {1: [7], 3: [7, 30]}  # the first occurrence stays
    whole = read_corpus(path, LIMITS, on_invalid="quarantine")
    assert [(r.path, r.row) for r in rejected] == [(path, 4), (path, 9), (path, 11)]
    assert rejected == list(whole.rejected)  # same records, reasons included
    _assert_same_docs(*assemble_shard(0, MAX_LEN, corpora, drops, ordered=False), whole)
    for lo, hi in [(0, 0), (1, 4), (MAX_LEN, MAX_LEN)]:
        _assert_same_docs(
            *assemble_shard(lo, hi, corpora, drops, ordered=False),
            read_corpus(path, LIMITS, length_range=(lo, hi), on_invalid="quarantine"),
        )


def test_read_piece_refuses_a_file_changed_after_planning(tmp_path, ordered_dir):
    pieces, _, _ = plan_pieces(ordered_dir, 5)
    read_piece(pieces[2], LIMITS)
    st = os.stat(pieces[2].path)
    os.utime(pieces[2].path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same bytes, a new mtime
    with pytest.raises(InputError, match="modified after the job listed it") as err:
        read_piece(pieces[2], LIMITS)
    assert err.value.path == pieces[2].path
    read_piece(pieces[0], LIMITS)  # the other file is untouched

    text = tmp_path / "docs.txt"
    text.write_text("1,2\n")
    (piece,), _, _ = plan_pieces(str(text), 1)
    st = os.stat(text)
    with open(text, "a") as f:
        f.write("3\n")  # grows: a writer still at work
    os.utime(text, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the old mtime
    with pytest.raises(InputError, match="modified after the job listed it"):
        read_piece(piece, LIMITS)


def test_assembled_pieces_can_stay_apart_for_the_gpu(tmp_path):
    rng = np.random.default_rng(5)
    sets = _random_sets(rng, 90)
    path = str(tmp_path / "docs.parquet")
    pq.write_table(pa.table({"doc_id": np.arange(90), "tokens": pa.array(sets, pa.list_(pa.int32()))}), path, row_group_size=20)
    pieces, _, _ = plan_pieces(path, 1)
    read = [read_piece(p, LIMITS)[1] for p in pieces]
    for lo, hi in ((0, MAX_LEN), (2, 5)):
        ids, whole = assemble_shard(lo, hi, read)
        apart_ids, apart = assemble_shard(lo, hi, read, concatenate=False)
        assert isinstance(apart, list) and len(apart) == len(read)
        assert np.array_equal(ids, apart_ids)
        assert [s for batch in apart for s in batch.to_lists()] == whole.to_lists()
