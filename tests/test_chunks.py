"""Query chunks: the plan (chunks shrinking near the end) and the stream that pairs chunks with their queries."""

import numpy as np
import pytest

from settopk.jobs.chunks import TAIL_MIN_QUERIES, TAIL_SHARE, chunk_stream, plan_chunks
from settopk.kernels import SetBatch


def _bounds(chunks):
    return [(c.lo, c.hi) for c in chunks]


def test_plan_shrinks_the_chunks_near_the_end():
    assert _bounds(plan_chunks(0, 100)) == []
    assert _bounds(plan_chunks(2000, 100_000)) == [(0, 2000)]  # the quick start: one part
    assert _bounds(plan_chunks(10, 3)) == [(0, 3), (3, 6), (6, 9), (9, 10)]
    chunks = plan_chunks(1_000_000, 100_000)
    assert _bounds(chunks[:6]) == [(lo, lo + 100_000) for lo in range(0, 600_000, 100_000)]
    assert len(chunks) == 21 and [c.hi - c.lo for c in chunks[-5:]] == [TAIL_MIN_QUERIES] * 5
    for n, size in [(1_000_000, 100_000), (10_000_000, 100_000), (123_457, 50_000), (25_000, 30_000), (19_999, 100_000),
                    (20_000, 100_000), (10, 3)]:
        chunks = plan_chunks(n, size)
        # Consecutive, no gap, indices in order, none across a window of `size` queries.
        assert [c.index for c in chunks] == list(range(len(chunks)))
        assert [c.lo for c in chunks][1:] == [c.hi for c in chunks][:-1] and chunks[0].lo == 0 and chunks[-1].hi == n
        assert all(0 < c.hi - c.lo <= size and c.lo // size == (c.hi - 1) // size for c in chunks)
        for c in chunks:
            window_lo = c.lo // size * size
            after = n - c.hi
            # A full window, or at most a quarter of the queries after it (or the smallest
            # chunk), grown only by a window's remainder too small to stand alone.
            assert c.hi - c.lo == min(size, n - window_lo) or c.hi - c.lo <= max(TAIL_MIN_QUERIES, after // TAIL_SHARE) + (
                TAIL_MIN_QUERIES if c.lo == window_lo else 0), (n, size, c)
            assert c.lo == window_lo or c.lo - window_lo >= TAIL_MIN_QUERIES or size <= TAIL_MIN_QUERIES
    assert len(plan_chunks(19_999, 100_000)) == 1 and len(plan_chunks(20_000, 100_000)) == 2
    ten = plan_chunks(10_000_000, 100_000)  # the same tail, after 96 whole windows
    assert len(ten) == 96 + 15 and [c.hi - c.lo for c in ten[96:]] == [c.hi - c.lo for c in plan_chunks(1_000_000, 100_000)[6:]]


@pytest.mark.parametrize("done", [set(), {0, 3}, {4, 5, 6}])
def test_stream_slices_the_cut_window_and_skips_done_chunks(monkeypatch, done):
    from settopk.jobs import chunks as module

    monkeypatch.setattr(module, "TAIL_MIN_QUERIES", 2)
    n, size = 23, 8
    ids = [f"q{i}" for i in range(n)]
    sets = SetBatch.from_lists([[i, i + 1] for i in range(n)])
    windows = ((ids[lo : lo + size], sets.take(np.arange(lo, min(lo + size, n)))) for lo in range(0, n, size))
    plan = plan_chunks(n, size)
    assert _bounds(plan) == [(0, 5), (5, 8), (8, 10), (10, 12), (12, 14), (14, 16), (16, 19), (19, 21), (21, 23)]
    got = list(chunk_stream(plan, windows, size, done))  # done {4, 5, 6}: the middle window's last two, the last's first
    assert [c.index for c, _, _ in got] == [c.index for c in plan if c.index not in done]
    for chunk, chunk_ids, chunk_sets in got:
        assert chunk_ids == ids[chunk.lo : chunk.hi]
        assert chunk_sets.to_lists() == [[i, i + 1] for i in range(chunk.lo, chunk.hi)]


def _write_part(directory, index, ranks):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from settopk.jobs.output import part_name

    pq.write_table(pa.table({"rank": pa.array(ranks, pa.int16())}), directory / part_name(index))


def test_check_parts_counts_the_rows_and_names_the_first_bad_part_in_query_order(tmp_path):
    from settopk.jobs.chunks import check_parts

    plan = plan_chunks(7, 2)  # [0, 2), [2, 4), [4, 6), [6, 7)
    for c in plan:
        _write_part(tmp_path, c.index, np.tile(np.arange(1, 4), c.hi - c.lo))
    assert check_parts(tmp_path, plan, 3) == 21
    _write_part(tmp_path, 3, [1, 2])  # one rank short
    (tmp_path / "part-00002.parquet").unlink()
    with pytest.raises(RuntimeError, match=r"part-00002\.parquet: part of queries 4\.\.5 is missing"):
        check_parts(tmp_path, plan, 3)  # part 2 comes first, though part 3 is bad too
    _write_part(tmp_path, 2, [1, 2, 3, 1, 3, 2])
    with pytest.raises(RuntimeError, match=r"part-00002\.parquet: ranks are not 1\.\.3 for every query"):
        check_parts(tmp_path, plan, 3)
    _write_part(tmp_path, 2, np.tile(np.arange(1, 4), 2))
    with pytest.raises(RuntimeError, match=r"part-00003\.parquet: 2 rows, expected 3 for queries 6\.\.6"):
        check_parts(tmp_path, plan, 3)


def test_read_ahead_reads_the_next_item_before_it_is_asked_for():
    import threading

    from settopk.jobs.chunks import ReadAhead

    asked = []
    first_read = threading.Event()

    def items():
        for i in range(4):
            asked.append(i)
            if i == 0:
                first_read.set()
            yield i

    ahead = ReadAhead(items())
    assert first_read.wait(10), "the first item was not read on construction"
    assert list(ahead) == [0, 1, 2, 3] and asked == [0, 1, 2, 3]
    ahead.close()
    ahead.close()


def test_read_ahead_raises_the_error_where_its_item_would_come_and_closes_midway():
    from settopk.jobs.chunks import ReadAhead

    def failing():
        yield "a"
        raise ValueError("the input changed")

    got = []
    with pytest.raises(ValueError, match="the input changed"):
        for item in ReadAhead(failing()):
            got.append(item)
    assert got == ["a"]
    endless = ReadAhead(iter(int, 1))  # never ends: close must stop it anyway
    assert next(iter(endless)) == 0
    endless.close()


def test_check_parts_of_a_threshold_run_checks_each_querys_recorded_row_count(tmp_path):
    """A threshold part records its rows per query in its footer: the check counts them, ranks 1..n
    per query (queries without pairs have no rows), and names a part whose counts or ranks disagree."""
    import pyarrow as pa

    from settopk.jobs.chunks import Chunk, check_parts, pair_counts_metadata, read_part_pair_ids
    from settopk.jobs.output import RESULT_SCHEMA, PartWriter

    def part(index, counts, recorded):
        rows = [(str(q), r, q * 10 + r, 1.0, 1, 1, 1) for q, n in enumerate(counts) for r in range(1, n + 1)]
        table = pa.Table.from_arrays([pa.array(c, type=f.type) for c, f in zip(zip(*rows), RESULT_SCHEMA)], schema=RESULT_SCHEMA)
        writer = PartWriter(tmp_path, index)
        writer.write(table)
        writer.add_metadata(pair_counts_metadata(recorded))
        writer.close()

    part(0, [2, 0, 3, 0, 0, 1], [2, 0, 3, 0, 0, 1])
    assert check_parts(tmp_path, [Chunk(0, 0, 6)], None) == 6
    assert [ids.tolist() for ids in read_part_pair_ids(tmp_path, 0)] == [[1, 2], [], [21, 22, 23], [], [], [51]]
    with pytest.raises(RuntimeError, match="cover 6 queries, expected 5 for queries 0..4"):
        check_parts(tmp_path, [Chunk(0, 0, 5)], None)
    part(1, [2, 0, 3, 0, 0, 1], [2, 0, 2, 0, 0, 2])  # as many rows, other queries'
    with pytest.raises(RuntimeError, match="part-00001.parquet: ranks are not 1..n for every query"):
        check_parts(tmp_path, [Chunk(1, 0, 6)], None)
