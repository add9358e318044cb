"""Random Parquet inputs for the fuzz tests: Arrow types, nulls, nesting and empty row groups,
with what a correct reader must make of them (a reference written apart from the readers)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import strategies as st

VOCAB_SIZE = 300
MAX_LEN = 4

_INT_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_BAD_VALUE_TYPES = [pa.float64()]
_STRING_TYPES = [pa.string(), pa.large_string(), pa.binary()]
_VALUES = [0, 1, 2, 3, 7, 127, 255, 299, 300, 301, 65535, 65536, 2**31, 2**40, -1, -128]
_DOC_IDS = [0, 1, 2, 3, 5, 9, 255, 2**40, 2**63 - 1, 2**63, -1, -7]


def _fits(value: int, t: pa.DataType) -> bool:
    if pa.types.is_unsigned_integer(t):
        return 0 <= value < 2 ** t.bit_width
    return -(2 ** (t.bit_width - 1)) <= value < 2 ** (t.bit_width - 1)


@dataclass
class Case:
    """One fuzzed Parquet file: its columns and row groups, and what a reader must return."""

    id_column: str
    id_type: pa.DataType
    tokens_type: pa.DataType
    ids: list
    tokens: list
    row_group_size: int
    empty_groups: int  # empty row groups written before the rows

    @property
    def schema_ok(self) -> bool:
        """The file's schema is one the readers take."""
        value = self.tokens_type.value_type if pa.types.is_list(self.tokens_type) or pa.types.is_large_list(self.tokens_type) else None
        tokens_ok = value is not None and (pa.types.is_integer(value) or value in _STRING_TYPES)
        id_ok = pa.types.is_integer(self.id_type) or (self.id_column == "query_id" and pa.types.is_string(self.id_type))
        return tokens_ok and id_ok

    def bad_rows(self) -> set[int]:
        """Rows that break a rule (the schema being fine)."""
        bad = set()
        for row, (i, t) in enumerate(zip(self.ids, self.tokens)):
            if i is None or t is None:
                bad.add(row)
            elif self.id_column == "doc_id" and not 0 <= i < 2**63:
                bad.add(row)
            elif any(v is None for v in t) or len(set(t)) > MAX_LEN:  # any integer or string is a token
                bad.add(row)
        return bad

    def valid(self) -> list[tuple]:
        """``(id, sorted set)`` of the valid rows, in input order (ids as the reader returns them)."""
        bad = self.bad_rows()
        as_read = (lambda v: v.encode() if isinstance(v, str) else v)  # strings come back as their UTF-8 bytes
        return [(i if self.id_column == "doc_id" else str(i), sorted({as_read(v) for v in t}))
                for row, (i, t) in enumerate(zip(self.ids, self.tokens)) if row not in bad]

    def write(self, path) -> str:
        table = pa.table({self.id_column: pa.array(self.ids, self.id_type), "tokens": pa.array(self.tokens, self.tokens_type)})
        with pq.ParquetWriter(path, table.schema) as writer:
            for _ in range(self.empty_groups):
                writer.write_table(table.slice(0, 0))
            if table.num_rows:
                writer.write_table(table, row_group_size=self.row_group_size)
        return str(path)


@st.composite
def cases(draw, id_column: str = "doc_id") -> Case:
    """A fuzzed Parquet input for ``id_column`` (``doc_id`` or ``query_id``); ids are unique."""
    clean = draw(st.booleans())  # half the cases hold only valid rows, so the sets themselves get compared
    value_type = draw(st.sampled_from(_INT_TYPES + _STRING_TYPES if clean else _INT_TYPES + _STRING_TYPES + _BAD_VALUE_TYPES))
    shape = draw(st.sampled_from(["list", "large_list"] if clean else ["list", "large_list", "nested"]))
    n = draw(st.integers(0, 8))
    if pa.types.is_integer(value_type):
        pool = [v for v in _VALUES if _fits(v, value_type)] + ([] if clean else [None])
        size = MAX_LEN if clean else 6
        one = st.lists(st.sampled_from(pool), max_size=size)
        tokens = draw(st.lists(one if clean else st.one_of(st.none(), one), min_size=n, max_size=n))
    elif value_type in _STRING_TYPES:
        pool = ["1", "x", "", "é"] if value_type != pa.binary() else [b"1", b"", b"\x00"]
        one = st.lists(st.sampled_from(pool + ([] if clean else [None])), max_size=MAX_LEN if clean else 6)
        tokens = draw(st.lists(one if clean else st.one_of(st.none(), one), min_size=n, max_size=n))
    else:
        tokens = draw(st.lists(st.lists(st.sampled_from([1.0, 2.5, None]), max_size=3), min_size=n, max_size=n))
    if shape == "nested":
        tokens_type = pa.list_(pa.list_(value_type))
        tokens = [None if t is None else [t] for t in tokens]
    else:
        tokens_type = (pa.list_ if shape == "list" else pa.large_list)(value_type)
    if id_column == "doc_id":
        id_type = draw(st.sampled_from(_INT_TYPES if clean else _INT_TYPES + [pa.string()]))
        if pa.types.is_integer(id_type):
            pool = [v for v in _DOC_IDS if _fits(v, id_type) and (not clean or 0 <= v < 2**63)]
            ids = draw(st.lists(st.sampled_from(pool), min_size=min(n, len(pool)), max_size=min(n, len(pool)), unique=True))
        else:
            ids = [str(i) for i in range(n)]
    else:
        id_type = draw(st.sampled_from([pa.string(), pa.int64()] if clean else [pa.string(), pa.int64(), pa.float64()]))
        ids = [f"q{i}" for i in range(n)] if pa.types.is_string(id_type) else ([float(i) for i in range(n)] if pa.types.is_floating(id_type) else list(range(n)))
    n = len(ids)
    tokens = tokens[:n]
    null_ids = draw(st.sets(st.integers(0, max(n - 1, 0)), max_size=2)) if n and not clean else set()
    ids = [None if row in null_ids else i for row, i in enumerate(ids)]
    return Case(id_column, id_type, tokens_type, ids, tokens, draw(st.integers(1, 4)), draw(st.integers(0, 2)))
