"""Fuzz target for the text readers: ``read_corpus`` against an independent line-by-line reference.

Run with atheris (``pip install atheris``)::

    python tests/fuzz_text_parser.py -atheris_runs=200000 [corpus_dir]

The same check runs under hypothesis in ``tests/test_inputs_text_fuzz.py`` on every CI run. The
reference is written from the format's rules in ``settopk/shards/inputs/__init__.py``, not from the code:
lines end in ``\\n`` or ``\\r\\n``; a line of only spaces and tabs is an empty set; otherwise
comma-separated decimal ids (``-`` allowed), spaces and tabs around an id allowed; ids 64-bit
integers (in ``[-2**63, 2**64)``, a file's ids all signed or all unsigned: reported at the first line
holding an id of ``2**63`` or more, where no line is bad on its own); at most ``max_len`` distinct ids.
"""

from __future__ import annotations

import os
import sys
import tempfile

VOCAB_SIZE = 1000
MAX_LEN = 6


def reference_parse(data: bytes):
    """``(sets, None)`` for a valid file, or ``(None, bad_line)`` with the first bad line (1-based)."""
    if not data:
        return [], None
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    sets = []
    for number, line in enumerate(lines, start=1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if b"\r" in line:
            return None, number
        if line.strip(b" \t") == b"":
            sets.append([])
            continue
        ids = set()
        for field in line.split(b","):
            text = field.strip(b" \t")
            digits = text[1:] if text.startswith(b"-") else text
            if not digits or not all(48 <= c <= 57 for c in digits) or not -(2**63) <= int(text) < 2**64:
                return None, number
            ids.add(int(text))
        if len(ids) > MAX_LEN:
            return None, number
        sets.append(sorted(ids))
    if any(v < 0 for s in sets for v in s):
        for number, s in enumerate(sets, start=1):
            if any(v >= 2**63 for v in s):
                return None, number
    return sets, None


def check(data: bytes) -> None:
    """Raise AssertionError when ``read_corpus`` and the reference disagree on ``data``."""
    from settopk.shards.inputs import InputError, SetLimits, read_corpus

    expected, bad_line = reference_parse(data)
    fd, path = tempfile.mkstemp(suffix=".txt")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            corpus = read_corpus(path, SetLimits(vocab_size=VOCAB_SIZE, max_len=MAX_LEN))
        except InputError as exc:
            assert bad_line is not None, f"rejected a valid file: {exc}"
            assert exc.line == bad_line, f"reported line {exc.line}, first bad line is {bad_line}: {exc}"
            return
        assert bad_line is None, f"accepted a file whose line {bad_line} is bad"
        assert corpus.docs.to_lists() == expected
        assert corpus.doc_ids.tolist() == list(range(len(expected)))
    finally:
        os.unlink(path)


def main() -> None:
    import atheris

    with atheris.instrument_imports():
        import settopk.shards.inputs  # noqa: F401

    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
