"""InputError (settopk.shards.inputs.errors): its message, and its attributes across pickling (Ray ships it)."""

from __future__ import annotations

import pickle

from settopk.shards.inputs import InputError


def test_input_error_pickles_with_its_attributes():
    error = InputError("docs.txt", "a", "b", "c", line=3)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, ValueError)
    assert (copy.path, copy.line, copy.row, str(copy)) == ("docs.txt", 3, None, "docs.txt:3 (1-based line): expected a, found b; fix: c")
    assert str(InputError("x.parquet", "a", "b", "c", row=0)) == "x.parquet row 0 (0-based row): expected a, found b; fix: c"
    plain = pickle.loads(pickle.dumps(InputError("no docs; expected at least one")))
    assert (str(plain), plain.path, plain.line, plain.row) == ("no docs; expected at least one", None, None, None)
