"""The Parquet readers against a reference on random Arrow types, nulls, nesting and empty row
groups, docs and queries, quarantine off and on: every case is either the reference's sets or
an InputError naming a bad row (never another exception)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from settopk.shards.inputs import InputError, SetLimits, read_corpus, read_queries
from tests.parquet_fuzz import MAX_LEN, VOCAB_SIZE, cases

LIMITS = SetLimits(vocab_size=VOCAB_SIZE, max_len=MAX_LEN)
_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check(case, path, on_invalid: str) -> None:
    read = read_corpus if case.id_column == "doc_id" else read_queries
    if not case.schema_ok:
        with pytest.raises(InputError):
            read(path, LIMITS, on_invalid=on_invalid)
        return
    bad = case.bad_rows()
    if bad and on_invalid == "error":
        with pytest.raises(InputError) as excinfo:
            read(path, LIMITS, on_invalid=on_invalid)
        assert excinfo.value.row in bad and excinfo.value.path == path
        return
    got = read(path, LIMITS, on_invalid=on_invalid)
    assert sorted(r.row for r in got.rejected) == sorted(bad)
    expected = case.valid()
    if case.id_column == "doc_id":
        expected.sort()
        assert list(zip(got.doc_ids.tolist(), got.docs.to_lists())) == expected
    else:
        assert list(zip(got.query_ids, got.queries.to_lists())) == expected


@_SETTINGS
@given(case=cases("doc_id"))
@pytest.mark.parametrize("on_invalid", ["error", "quarantine"])
def test_parquet_corpus_agrees_with_reference(tmp_path, case, on_invalid):
    _check(case, case.write(tmp_path / "docs.parquet"), on_invalid)


@_SETTINGS
@given(case=cases("query_id"))
@pytest.mark.parametrize("on_invalid", ["error", "quarantine"])
def test_parquet_queries_agree_with_reference(tmp_path, case, on_invalid):
    _check(case, case.write(tmp_path / "q.parquet"), on_invalid)
