"""The corpus read by Ray reader tasks (settopk.shards.reading) gives exactly what one pass of ``read_corpus``
gives: the same docs, the same first error, the same rows set aside."""

from __future__ import annotations

import numpy as np
import pytest

from settopk.shards import reading
from settopk.shards.reading import pieces_for_cluster, read_corpus_pieces
from settopk.shards.inputs import InputError, assemble_shard, plan_pieces, read_corpus
from tests.piece_helpers import LIMITS, MAX_LEN, ordered_dir, repeated_across_pieces  # noqa: F401 (fixtures)
from tests.piece_helpers import assert_same_docs as _assert_same_docs
from tests.piece_helpers import random_sets as _random_sets
from tests.piece_helpers import write_parquet as _write_parquet


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
    big[29_000] = [1, None]  # a null token, late in piece 1
    bad_small = list(small)
    bad_small[3] = [2, None]
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
    sets[2] = [1, None]  # a bad row (id 4): the later row with id 4 (row 8) then stays
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
