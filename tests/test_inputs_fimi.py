"""The FIMI text format (a ``*.dat`` file: one set per line, whitespace-separated non-negative ids):
the readers, its errors located by file and line, ``settopk.Index.build`` of a ``.dat`` and the job's
threshold self-join of one against the oracle."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import settopk
from settopk.jobs import score as job
from settopk.kernels import brute_force_threshold
from settopk.shards.inputs import InputError, SetLimits, read_corpus, read_queries
from settopk.shards.inputs import text as inputs_text
from tests.input_helpers import assert_error, write
from tests.job_helpers import job_config, result_rows, score_apart

LIMITS = SetLimits()


def test_fimi_corpus_reads_whitespace_separated_sets_with_line_ids(tmp_path):
    # Trailing spaces (as retail.dat has), runs of spaces and tabs, a repeated id, '\r\n', a blank line.
    path = write(tmp_path / "x.dat", "3 1 2 \n7\t\t5  5\r\n \t\n40000 9\n")
    corpus = read_corpus(path, LIMITS)
    assert corpus.fmt == "text" and corpus.files == (str(path),)
    assert corpus.doc_ids.tolist() == [0, 1, 2, 3]
    assert corpus.docs.to_lists() == [[1, 2, 3], [5, 7], [], [9, 40000]]
    assert corpus.n_with_repeats == 1
    queries = read_queries(path, LIMITS)
    assert queries.query_ids == ["0", "1", "2", "3"] and queries.queries.to_lists() == corpus.docs.to_lists()


def test_an_empty_line_is_an_empty_doc_and_keeps_later_line_numbers(tmp_path):
    corpus = read_corpus(write(tmp_path / "e.dat", "1 2\n\n\n4\n"), LIMITS)
    assert corpus.doc_ids.tolist() == [0, 1, 2, 3]
    assert corpus.docs.to_lists() == [[1, 2], [], [], [4]]


@pytest.mark.parametrize("data, line, part", [
    ("1 2\n3 x 4\n", 2, "'x' at id #2"),
    ("1 2\n3\n4,5\n", 3, "'4,5' at id #1"),  # a comma-separated file named .dat
    ("1 -2\n", 1, "'-2' at id #2"),  # ids are non-negative
    ("1 2.5\n", 1, "'2.5' at id #2"),
])
def test_a_bad_token_is_an_input_error_naming_file_and_line(tmp_path, data, line, part):
    path = write(tmp_path / "bad.dat", data)
    with pytest.raises(InputError) as excinfo:
        read_corpus(path, LIMITS)
    assert_error(excinfo, path, part, "whitespace-separated non-negative token ids", line=line)


def test_a_set_over_max_len_is_located(tmp_path):
    path = write(tmp_path / "long.dat", "1\n" + " ".join(map(str, range(5))) + "\n")
    with pytest.raises(InputError) as excinfo:
        read_corpus(path, SetLimits(max_len=4))
    assert_error(excinfo, path, "at most 4 distinct ids", line=2)


def test_the_vectorised_parser_agrees_with_the_line_checker_on_random_lines():
    rng = np.random.default_rng(46)
    pieces = [b"1", b"23", b" ", b"\t", b"  ", b"7", b"-", b",", b"x", b"65536"]
    for _ in range(300):
        line = b"".join(pieces[i] for i in rng.integers(0, len(pieces), size=int(rng.integers(0, 7))))
        parsed = inputs_text.parse_block(line + b"\n", LIMITS, fimi=True)
        reason = inputs_text.check_line(line, LIMITS, fimi=True)
        assert (parsed is None) == (reason is not None), line
        if parsed is not None:
            ids = sorted({int(t) for t in line.split()})
            lengths, tokens, _ = parsed
            assert lengths.tolist() == [len(ids)] and sorted(int(t) for t in tokens) == ids


def test_index_build_of_a_dat_equals_the_index_of_its_sets(tmp_path):
    sets = [[5, 1, 3], [1, 3], [], [2, 4, 5, 1], [3, 1, 5]]
    path = write(tmp_path / "s.dat", "".join(" ".join(map(str, s)) + " \n" for s in sets))
    from_file = settopk.Index.build(str(path), score="jaccard")
    from_lists = settopk.Index.build(sets, score="jaccard")
    assert from_file.n_docs == len(sets)
    a, b = from_file.search(sets, k=3), from_lists.search(sets, k=3)
    assert np.array_equal(a.doc_ids, b.doc_ids) and np.array_equal(a.overlap, b.overlap)


@pytest.mark.usefixtures("ray_cluster")
def test_job_threshold_self_join_of_a_dat_matches_the_oracle(tmp_path):
    rng = np.random.default_rng(7)
    docs = [rng.choice(12, size=int(rng.integers(0, 7)), replace=False).tolist() for _ in range(60)]
    docs += [[1, 2, 3], [3, 2, 1], []]
    path = write(tmp_path / "docs.dat", "".join(" ".join(map(str, d)) + "\n" for d in docs))
    out = tmp_path / "out"
    cfg = job_config(tmp_path)
    assert job.main(["--docs", str(path), "--self-join", "--threshold", "0.5", "--score", "jaccard", "--out", str(out),
                     "--config", cfg, "--quiet"]) == 0
    size = [len(d) for d in docs]
    expected = []
    for qi, pairs in enumerate(brute_force_threshold(docs, docs, Fraction(1, 2), score="jaccard")):
        kept = [p for p in pairs if p[0] != qi and (size[p[0]], p[0]) >= (size[qi], qi)]  # each pair once
        expected += [(str(qi), rank, d, score_apart(o, size[qi], dl, "jaccard"), o, size[qi], dl)
                     for rank, (d, o, dl) in enumerate(kept, 1)]
    assert result_rows(out) == expected and len(expected) > 20
