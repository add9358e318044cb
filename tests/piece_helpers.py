"""What the corpus-piece tests share (settopk.shards.inputs.pieces, and settopk.shards.reading through Ray): small
Parquet corpora in several row groups, and the check that pieces give what one read gives.

``ordered_dir`` and ``repeated_across_pieces`` are fixtures: a test module imports them by name."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.shards.inputs import SetLimits, pieces_ordered, plan_pieces, read_piece

MAX_LEN = 8
LIMITS = SetLimits(vocab_size=100, max_len=MAX_LEN)


def random_sets(rng, n, vocab=12, max_len=MAX_LEN):
    """Sets of every length 0..max_len, some with repeated ids (the readers de-duplicate)."""
    sets = []
    for _ in range(n):
        s = rng.choice(vocab, size=rng.integers(0, max_len + 1), replace=False).tolist()
        if s and rng.random() < 0.2:
            s = s + [s[0]]  # a repeated id: counts once
        sets.append(s)
    return sets


def write_parquet(path, ids, sets, row_group_size):
    """A Parquet corpus file (``doc_id`` int64, ``tokens`` list<int32>) in row groups of ``row_group_size``."""
    table = pa.table({"doc_id": pa.array(ids, pa.int64()), "tokens": pa.array(sets, pa.list_(pa.int32()))})
    pq.write_table(table, path, row_group_size=row_group_size)
    return str(path)


def read_all(path, target_rows, on_invalid="error"):
    """Plan the pieces of ``path`` and read each one: ``(pieces, summaries, corpora)``."""
    pieces, fmt, files = plan_pieces(path, target_rows)
    read = [read_piece(p, LIMITS, on_invalid) for p in pieces]
    return pieces, [s for s, _ in read], [c for _, c in read]


def assert_same_docs(doc_ids, docs, corpus):
    """The assembled ``doc_ids`` and ``docs`` are exactly ``corpus``'s."""
    assert doc_ids.dtype == np.int64
    assert doc_ids.tolist() == corpus.doc_ids.tolist()
    assert docs.to_lists() == corpus.docs.to_lists()


@pytest.fixture
def ordered_dir(tmp_path):
    """Two Parquet files in a directory (plus a skipped _SUCCESS), ids increasing across both, several
    row groups each: a.parquet 10 rows in groups of 3 (3, 3, 3, 1), b.parquet 7 rows in groups of 2."""
    rng = np.random.default_rng(5)
    root = tmp_path / "docs"
    root.mkdir()
    sets = random_sets(rng, 17)
    sets[3], sets[12] = [], list(range(MAX_LEN))  # an empty doc and one of max_len
    ids = np.sort(rng.choice(1000, size=17, replace=False))
    write_parquet(root / "a.parquet", ids[:10], sets[:10], 3)
    write_parquet(root / "b.parquet", ids[10:], sets[10:], 2)
    (root / "_SUCCESS").write_text("")
    return str(root)


@pytest.fixture
def repeated_across_pieces(tmp_path):
    """One file, row groups of 3 rows: doc_id 7 at row 1 (piece 0), again at rows 4 (piece 1) and
    9 (piece 3); doc_id 30 at row 6 (piece 2) and again at row 11 (piece 3). Read as 4 pieces."""
    rng = np.random.default_rng(4)
    ids = [1, 7, 2, 20, 7, 21, 30, 31, 32, 7, 40, 30]
    sets = random_sets(rng, len(ids))
    sets[4], sets[9] = [], list(range(MAX_LEN))  # the dropped repeats have different lengths than the first
    path = write_parquet(tmp_path / "docs.parquet", ids, sets, 3)
    pieces, summaries, corpora = read_all(path, 3)
    assert len(pieces) == 4 and not pieces_ordered(summaries)

    def fetch_ids(index):
        return corpora[index].doc_ids, corpora[index].source_rows

    return path, pieces, summaries, corpora, fetch_ids
