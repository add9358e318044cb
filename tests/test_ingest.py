"""Reading the corpus in pieces (shards.ingest, jobs.reading) gives exactly what one pass of
``read_corpus`` gives: the same docs, the same first error, the same rows set aside."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs import reading
from jobs.reading import pieces_for_cluster, read_corpus_pieces
from shards.inputs import (
    InputError,
    SetLimits,
    assemble_shard,
    check_doc_ids,
    pieces_ordered,
    plan_pieces,
    read_corpus,
    read_piece,
)

MAX_LEN = 8
LIMITS = SetLimits(vocab_size=100, max_len=MAX_LEN)

def _random_sets(rng, n, vocab=12, max_len=MAX_LEN):
    """Sets of every length 0..max_len, some with repeated ids (the readers de-duplicate)."""
    sets = []
    for _ in range(n):
        s = rng.choice(vocab, size=rng.integers(0, max_len + 1), replace=False).tolist()
        if s and rng.random() < 0.2:
            s = s + [s[0]]  # a repeated id: counts once
        sets.append(s)
    return sets


def _write_parquet(path, ids, sets, row_group_size):
    table = pa.table({"doc_id": pa.array(ids, pa.int64()), "tokens": pa.array(sets, pa.list_(pa.int32()))})
    pq.write_table(table, path, row_group_size=row_group_size)
    return str(path)


def _read_all(path, target_rows, on_invalid="error"):
    pieces, fmt, files = plan_pieces(path, target_rows)
    read = [read_piece(p, LIMITS, on_invalid) for p in pieces]
    return pieces, [s for s, _ in read], [c for _, c in read]


def _assert_same_docs(doc_ids, docs, corpus):
    assert doc_ids.dtype == np.int64
    assert doc_ids.tolist() == corpus.doc_ids.tolist()
    assert docs.to_lists() == corpus.docs.to_lists()


def _no_fetch(index):
    raise AssertionError(f"ids of piece {index} fetched although the pieces' id ranges do not overlap")


@pytest.fixture
def ordered_dir(tmp_path):
    """Two Parquet files in a directory (plus a skipped _SUCCESS), ids increasing across both, several
    row groups each: a.parquet 10 rows in groups of 3 (3, 3, 3, 1), b.parquet 7 rows in groups of 2."""
    rng = np.random.default_rng(5)
    root = tmp_path / "docs"
    root.mkdir()
    sets = _random_sets(rng, 17)
    sets[3], sets[12] = [], list(range(MAX_LEN))  # an empty doc and one of max_len
    ids = np.sort(rng.choice(1000, size=17, replace=False))
    _write_parquet(root / "a.parquet", ids[:10], sets[:10], 3)
    _write_parquet(root / "b.parquet", ids[10:], sets[10:], 2)
    (root / "_SUCCESS").write_text("")
    return str(root)


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
        (10, [1, 150], None, "150 at id #2"),  # token id outside the vocabulary
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
    from shards.inputs import PieceSummary

    def summary(index, lo, hi, n=1):
        return PieceSummary(index, np.zeros(MAX_LEN + 1, np.int64), n, 0, lo, hi, 0, ())

    assert pieces_ordered([])
    assert pieces_ordered([summary(0, 0, 4), summary(1, -1, -1, n=0), summary(2, 5, 9)])  # empty pieces skipped
    assert not pieces_ordered([summary(0, 0, 4), summary(1, 4, 9)])  # the same id at a boundary
    assert not pieces_ordered([summary(0, 0, 4), summary(1, -1, -1, n=0), summary(2, 3, 9)])  # overlapping ranges


@pytest.fixture
def repeated_across_pieces(tmp_path):
    """One file, row groups of 3 rows: doc_id 7 at row 1 (piece 0), again at rows 4 (piece 1) and
    9 (piece 3); doc_id 30 at row 6 (piece 2) and again at row 11 (piece 3). Read as 4 pieces."""
    rng = np.random.default_rng(4)
    ids = [1, 7, 2, 20, 7, 21, 30, 31, 32, 7, 40, 30]
    sets = _random_sets(rng, len(ids))
    sets[4], sets[9] = [], list(range(MAX_LEN))  # the dropped repeats have different lengths than the first
    path = _write_parquet(tmp_path / "docs.parquet", ids, sets, 3)
    pieces, summaries, corpora = _read_all(path, 3)
    assert len(pieces) == 4 and not pieces_ordered(summaries)

    def fetch_ids(index):
        return corpora[index].doc_ids, corpora[index].source_rows

    return path, pieces, summaries, corpora, fetch_ids


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


# --------------------------------------------------------------------------------------------------
# Through Ray (jobs.reading)


def _assemble_read(corpus_read, lo=0, hi=MAX_LEN):
    import ray

    return assemble_shard(lo, hi, [ray.get(r) for r in corpus_read.corpus_refs], corpus_read.drops, corpus_read.ordered)


def test_pieces_for_cluster_sizes_pieces_to_the_cluster(tmp_path, ordered_dir, monkeypatch):
    text = tmp_path / "docs.txt"
    text.write_text("1\n")
    assert [p.row_groups for p in pieces_for_cluster(str(text), 8)[0]] == [None]
    pieces, fmt, files = pieces_for_cluster(ordered_dir, 8)  # 17 rows: far below the smallest piece worth a task
    assert fmt == "parquet" and len(files) == 2
    assert [p.row_groups for p in pieces] == [(0, 1, 2, 3), (0, 1, 2, 3)]
    monkeypatch.setattr(reading, "_MIN_PIECE_ROWS", 1)
    pieces, _, _ = pieces_for_cluster(ordered_dir, 4)  # about one piece per CPU: 17 rows / 4 -> 5 rows
    assert [(p.index, p.row_groups) for p in pieces] == [(p.index, p.row_groups) for p in plan_pieces(ordered_dir, 5)[0]]


def test_ray_readers_give_the_corpus_read_in_one_pass(ray_cluster, tmp_path):
    rng = np.random.default_rng(6)
    root = tmp_path / "docs"
    root.mkdir()
    sets = _random_sets(rng, 60)
    ids = rng.permutation(500)[:60]  # unordered ids across pieces, none repeated
    for i in range(3):
        _write_parquet(root / f"{i}.parquet", ids[20 * i : 20 * (i + 1)], sets[20 * i : 20 * (i + 1)], 5)
    pieces, _, _ = plan_pieces(str(root), 10)
    done = []
    read = read_corpus_pieces(pieces, LIMITS, "error", on_done=lambda: done.append(1), reader_cpus=0.5)
    whole = read_corpus(str(root), LIMITS)
    assert len(done) == len(pieces) == 6
    assert [s.index for s in read.summaries] == list(range(6)) and not read.ordered and read.drops == {}
    assert read.n_docs == whole.docs.n_sets and read.n_with_repeats == whole.n_with_repeats
    assert read.length_counts.tolist() == np.bincount(whole.docs.lengths, minlength=MAX_LEN + 1).tolist()
    assert read.rejected == []
    _assert_same_docs(*_assemble_read(read), whole)
    _assert_same_docs(*_assemble_read(read, 3, 6), read_corpus(str(root), LIMITS, length_range=(3, 6)))


def test_readers_are_dealt_over_the_shard_bundles_and_the_free_cpus(ray_cluster, tmp_path):
    from types import SimpleNamespace

    from ray.util.placement_group import placement_group, remove_placement_group

    def dealt(n_pieces, bundles, cluster_cpus, reader_cpus=1.0):
        where = reading._reader_placements(n_pieces, SimpleNamespace(bundle_specs=bundles), reader_cpus, cluster_cpus)
        return [(w.placement_group_bundle_index if w else None, cpus) for w, cpus in where]

    # 16 CPUs, 8 in a GPU shard's bundle: one wave of 15 readers, 8 in the bundle and 7 outside.
    assert dealt(15, [{"CPU": 8.0, "GPU": 1.0}], 16) == [(0, 1.0)] * 8 + [(None, 1.0)] * 7
    assert dealt(5, [{"CPU": 2.5}, {"GPU": 1.0}], 3.5) == [(0, 1.0), (0, 1.0), (None, 1.0), (0, 1.0), (0, 1.0)]
    # Bundles holding every CPU in halves: readers ask for half a CPU inside them, never outside.
    assert dealt(5, [{"CPU": 0.5}] * 4, 2) == [(0, 0.5), (1, 0.5), (2, 0.5), (3, 0.5), (0, 0.5)]
    assert dealt(2, [{"CPU": 0.5}], 2, 0.0) == [(None, 0.0)] * 2  # reader_cpus 0: placed anywhere
    assert reading._reader_placements(2, None, 1.0, 8) == [(None, 1.0)] * 2
    rng = np.random.default_rng(8)
    root = tmp_path / "docs"
    root.mkdir()
    _write_parquet(root / "0.parquet", np.arange(40), _random_sets(rng, 40), 5)
    pieces, _, _ = plan_pieces(str(root), 10)
    group = placement_group([{"CPU": 1.0}])  # the 2-CPU cluster: one reader inside the bundle, one outside
    try:
        read = read_corpus_pieces(pieces, LIMITS, "error", group=group)
    finally:
        remove_placement_group(group)
    assert len(pieces) == 4 and read.n_docs == 40
    _assert_same_docs(*_assemble_read(read), read_corpus(str(root), LIMITS))


def test_ray_readers_report_the_first_bad_row_in_read_order(ray_cluster, tmp_path):
    """Pieces 1 and 5 both fail; piece 1 is much larger, so piece 5 usually fails first."""
    rng = np.random.default_rng(7)
    root = tmp_path / "docs"
    root.mkdir()
    small = _random_sets(rng, 10)
    big = [list(range(i % MAX_LEN)) for i in range(30_000)]
    big[29_000] = [1, 500]  # token out of range, late in piece 1
    bad_small = list(small)
    bad_small[3] = [2, 600]
    _write_parquet(root / "a.parquet", np.arange(10), small, 10)  # piece 0
    _write_parquet(root / "b.parquet", np.arange(10, 30_010), big, 30_000)  # piece 1
    for i, name in enumerate(["c", "d", "e", "f"]):  # pieces 2..5; f (piece 5) is bad
        _write_parquet(root / f"{name}.parquet", np.arange(10) + 40_000 + 10 * i, bad_small if name == "f" else small, 10)
    pieces, _, _ = plan_pieces(str(root), 10**9)
    assert len(pieces) == 6
    with pytest.raises(InputError) as whole:
        read_corpus(str(root), LIMITS)
    with pytest.raises(InputError) as err:
        read_corpus_pieces(pieces, LIMITS, "error")
    assert type(err.value) is InputError and str(err.value) == str(whole.value)
    assert err.value.path.endswith("b.parquet") and err.value.row == 29_000


def test_ray_readers_report_a_doc_id_repeated_across_pieces(ray_cluster, repeated_across_pieces):
    path, pieces, *_ = repeated_across_pieces
    with pytest.raises(InputError) as err:
        read_corpus_pieces(pieces, LIMITS, "error")
    assert err.value.row == 4 and f"doc_id 7 again (first at {path} row 1)" in str(err.value)


def test_ray_readers_quarantine_bad_rows_and_ids_repeated_across_pieces(ray_cluster, tmp_path):
    rng = np.random.default_rng(8)
    ids = [3, 9, 4, 9, 12, 3, 15, 16, 4, 20, 3, 22]
    sets = _random_sets(rng, len(ids))
    sets[2] = [1, 700]  # a bad row (id 4): the later row with id 4 (row 8) then stays
    sets[5] = list(range(MAX_LEN))
    path = _write_parquet(tmp_path / "docs.parquet", ids, sets, 3)
    pieces, _, _ = plan_pieces(path, 3)
    read = read_corpus_pieces(pieces, LIMITS, "quarantine")
    whole = read_corpus(path, LIMITS, on_invalid="quarantine")
    assert not read.ordered
    assert {i: sorted(v.tolist()) for i, v in read.drops.items()} == {1: [3, 9], 3: [3]}
    assert sorted((r.path, r.row) for r in read.rejected) == sorted((r.path, r.row) for r in whole.rejected)
    assert [r.row for r in whole.rejected] == [2, 3, 5, 10]
    assert read.n_docs == whole.docs.n_sets == len(ids) - 4
    assert read.length_counts.tolist() == np.bincount(whole.docs.lengths, minlength=MAX_LEN + 1).tolist()
    assert read.n_with_repeats == whole.n_with_repeats
    _assert_same_docs(*_assemble_read(read), whole)


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
