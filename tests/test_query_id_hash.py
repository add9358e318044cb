"""The validating pass's vectorised query-id hash: equal ids hash equal whatever their record
batch's layout, and repeats of integer ids (read as their decimal text) are found."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from settopk.shards.inputs import InputError, QueryStream, SetLimits
from settopk.shards.inputs.query_stream import _string_hashes


def test_equal_ids_hash_equal_in_one_width_and_in_mixed_batches():
    ids = [f"q{i:05d}" for i in range(1000)] + ["q7", "", "ü-ß", "q00007"]
    mixed = _string_hashes(pa.array(ids))
    assert (_string_hashes(pa.array(ids[:1000])) == mixed[:1000]).all()  # one width: the column path
    assert (_string_hashes(pa.array(ids, pa.large_string()).slice(990, 14)) == mixed[990:]).all()
    assert mixed[1003] == mixed[7] and len(np.unique(mixed)) == len(set(ids))


def test_repeated_integer_query_ids_across_record_batches_are_found(tmp_path):
    path = tmp_path / "q.parquet"
    ids = pa.array(list(range(100, 200)) + [150] + list(range(7, 10)), pa.int64())
    sets = pa.array([[1, 2]] * len(ids), pa.list_(pa.int32()))
    pq.write_table(pa.table({"query_id": ids, "tokens": sets}), path, row_group_size=30)
    with pytest.raises(InputError, match=r"query_id '150' again \(first at .*q.parquet row 50\)"):
        QueryStream(str(path), SetLimits(vocab_size=60, max_len=10))
    stream = QueryStream(str(path), SetLimits(vocab_size=60, max_len=10), on_invalid="quarantine")
    assert stream.n_queries == 103 and [r.row for r in stream.rejected] == [100]
    assert [q for chunk, _ in stream.chunks(40) for q in chunk] == [str(i) for i in range(100, 200)] + ["7", "8", "9"]
