"""Queries read chunk by chunk: the same queries, ids, errors and rejects as read_queries, in bounded memory."""

from __future__ import annotations

import os
import time
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.shards.inputs import InputError, QueryStream, SetLimits, read_queries

LIMITS = SetLimits(vocab_size=60, max_len=10)


def _sets(rng, n):
    return [sorted(set(rng.integers(0, 50, rng.integers(0, 11)).tolist())) for _ in range(n)]


def _text(path, sets, bad=()):
    lines = [",".join(map(str, s)) for s in sets]
    for i, text in bad:
        lines[i] = text
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def _parquet_dir(root, ids, sets, files=3, row_group_size=16):
    root.mkdir()
    cut = np.linspace(0, len(ids), files + 1).astype(int)
    for f, (lo, hi) in enumerate(zip(cut[:-1], cut[1:])):
        table = pa.table({"query_id": ids[lo:hi], "tokens": pa.array(sets[lo:hi], pa.list_(pa.int32()))})
        pq.write_table(table, root / f"part-{f}.parquet", row_group_size=row_group_size)
    return str(root)


def _streamed(stream, chunk_size, skip=0):
    chunks = list(stream.chunks(chunk_size, skip=skip))
    assert all(len(ids) == chunk_size for ids, _ in chunks[:-1])
    return [q for ids, _ in chunks for q in ids], [s for _, batch in chunks for s in batch.to_lists()]


def _check_same(path, on_invalid):
    want = read_queries(path, LIMITS, on_invalid=on_invalid)
    stream = QueryStream(path, LIMITS, on_invalid=on_invalid)
    assert (stream.n_queries, stream.n_with_repeats, stream.fmt) == (want.queries.n_sets, want.n_with_repeats, want.fmt)
    assert stream.files == want.files and stream.rejected == want.rejected
    for chunk_size in (1, 7, 64, 10**6):
        assert _streamed(stream, chunk_size) == (want.query_ids, want.queries.to_lists())
    ids, sets = _streamed(stream, 5, skip=3)
    assert ids == want.query_ids[15:] and sets == want.queries.to_lists()[15:]
    return stream


@pytest.mark.parametrize("seed", range(4))
def test_text_queries_stream_like_read_queries(tmp_path, seed):
    rng = np.random.default_rng(seed)
    sets = _sets(rng, 300)
    path = _text(tmp_path / "q.txt", sets)
    _check_same(path, "error")
    bad = _text(tmp_path / "bad.txt", sets, bad=[(5, "1,x"), (250, "7.0"), (251, "1,,2")])
    stream = _check_same(bad, "quarantine")
    assert [r.line for r in stream.rejected] == [6, 251, 252]
    with pytest.raises(InputError) as streamed:
        QueryStream(bad, LIMITS)
    with pytest.raises(InputError) as whole:
        read_queries(bad, LIMITS)
    assert str(streamed.value) == str(whole.value) and "bad.txt:6" in str(streamed.value)


@pytest.mark.parametrize("seed", range(4))
def test_parquet_queries_stream_like_read_queries_with_repeated_ids(tmp_path, seed):
    rng = np.random.default_rng(seed)
    sets = _sets(rng, 200)
    ids = [f"q{i}" for i in range(200)]
    _check_same(_parquet_dir(tmp_path / "unique", ids, sets), "error")
    repeated = [f"q{i % 150}" for i in range(200)]  # rows 150.. repeat ids of rows 0..49, across files
    sets[30] = list(range(12))  # too long: a bad row too
    path = _parquet_dir(tmp_path / "repeats", repeated, sets)
    stream = _check_same(path, "quarantine")
    # Row 30 is set aside, so row 180 is the first valid 'q30' and stays; the other 49 repeats go.
    assert stream.n_queries == 150 and len(stream.rejected) == 50
    with pytest.raises(InputError) as streamed:
        QueryStream(path, LIMITS)
    with pytest.raises(InputError) as whole:
        read_queries(path, LIMITS)
    assert str(streamed.value) == str(whole.value)


def test_query_directory_streams_too(tmp_path):
    d = tmp_path / "qdir"
    d.mkdir()
    for i in range(23):
        (d / f"{i:03d}.txt").write_text(f"{i},{i + 1}\n")
    _check_same(str(d), "error")


def test_queries_changed_between_the_passes_stop_the_run(tmp_path):
    path = _text(tmp_path / "q.txt", [[1], [2], [3]])
    stream = QueryStream(path, LIMITS)
    with open(path, "a") as f:
        f.write("4\n")
    os.utime(path, ns=(time.time_ns(), time.time_ns()))
    with pytest.raises(InputError, match=r"q.txt: expected input files that stay unchanged .* modified after the job validated it"):
        list(stream.chunks(2))


def test_streaming_holds_one_chunk_not_every_query(tmp_path, monkeypatch):
    from settopk.shards.inputs import text as inputs_text

    monkeypatch.setattr(inputs_text, "_BLOCK_BYTES", 1 << 16)  # many blocks: what a large file has
    rng = np.random.default_rng(0)
    n = 200_000
    lengths = rng.integers(1, 11, n)
    path = tmp_path / "many.txt"
    path.write_text("".join(",".join(map(str, range(k))) + "\n" for k in lengths.tolist()))

    def peak(fn) -> int:
        tracemalloc.start()
        try:
            fn()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def stream_all():
        stream = QueryStream(str(path), SetLimits(max_len=10))
        assert sum(len(ids) for ids, _ in stream.chunks(5_000)) == n

    whole = peak(lambda: read_queries(str(path), SetLimits(max_len=10)))
    streamed = peak(stream_all)
    assert streamed < whole / 3, (streamed, whole)
