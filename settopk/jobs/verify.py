"""Check a finished result dataset against the NumPy reference on a sample of queries.

``python -m settopk verify --docs PATH --queries PATH --results DIR [--sample 200] [--config NAME|FILE]``

Recomputes the top-k of a seeded sample of queries with the NumPy backend over
the whole corpus (one process, no Ray) and compares doc ids, overlaps and
lengths row by row. Exit code 0 when every sampled query matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import settopk.configs
from settopk.kernels import NumpyShardIndex

from . import add_version, prog_name
from .output import open_results, read_manifest

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface of ``settopk.jobs.verify``."""
    p = argparse.ArgumentParser(prog=prog_name("verify"), description=__doc__.splitlines()[0])
    add_version(p)
    p.add_argument("--docs", required=True, help="the corpus the run searched (as given to settopk score --docs)")
    p.add_argument("--queries", required=True, help="the queries the run searched (as given to settopk score --queries)")
    p.add_argument("--results", required=True, help="result directory (path or URI) written by settopk.jobs.score (a nightly run's: ROOT/dt=YYYY-MM-DD)")
    p.add_argument("--sample", type=int, default=200, help="queries to recheck (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the query sample (default: %(default)s)")
    p.add_argument("--config", default="local", help="config whose vocab_size and max_len the run used (default: %(default)s)")
    return p


def _dense(docs, queries, limits, docs_path: str, queries_path: str):
    """Docs and queries as dense ids (:mod:`settopk.shards.inputs.vocabulary`), as the job maps them."""
    from settopk.shards.inputs.vocabulary import VocabCounter, build_token_map, check_types

    counted = {}
    for name, sets, path in (("docs", docs, docs_path), ("queries", queries, queries_path)):
        counted[name] = VocabCounter(limits.vocab_size)
        counted[name].add(sets.tokens, path)
    to = check_types({**counted["queries"].types, **counted["docs"].types})
    token_map = build_token_map(counted["docs"].result(), counted["queries"].result(), limits.vocab_size, to)
    token_map.check_room(int(docs.lengths.max(initial=0)), int(queries.lengths.max(initial=0)))
    return token_map.docs(docs), token_map.queries(queries)


def main(argv=None) -> int:
    """Entry point of ``python -m settopk verify``; returns the exit code."""
    from settopk.shards.inputs import SetLimits, read_corpus, read_queries

    p = build_parser()
    args = p.parse_args(argv)

    cfg = settopk.configs.load_config(args.config)
    manifest = read_manifest(args.results)
    k = manifest["counts"]["k"]
    limits = SetLimits(vocab_size=cfg.vocab_size, max_len=cfg.max_len)
    t = time.perf_counter()
    queries = read_queries(args.queries, limits)
    corpus = read_corpus(args.docs, limits)
    rng = np.random.default_rng(args.seed)
    sample = np.sort(rng.choice(queries.queries.n_sets, size=min(args.sample, queries.queries.n_sets), replace=False))
    docs, sampled = _dense(corpus.docs, queries.queries.take(sample), limits, args.docs, args.queries)
    # The score the run ranked by: its manifest's (older results name none: Braun-Blanquet).
    index = NumpyShardIndex(docs, corpus.doc_ids, cfg.max_len, manifest.get("score", "braun_blanquet"))
    del corpus, docs
    expected = index.search(sampled, k)
    reference_s = time.perf_counter() - t

    table = open_results(args.results).to_table(columns=["query_id", "rank", "doc_id", "overlap", "doc_len"]).to_pydict()
    rows: dict[str, list] = {}
    for qid, rank, doc_id, ov, dl in zip(*table.values()):
        rows.setdefault(qid, []).append((rank, doc_id, ov, dl))
    mismatches = 0
    for j, qi in enumerate(sample):
        qid = queries.query_ids[qi]
        got = [(d, o, l) for _, d, o, l in sorted(rows.get(qid, []))]
        valid = expected.doc_ids[j] >= 0
        want = list(zip(expected.doc_ids[j][valid].tolist(), expected.overlap[j][valid].tolist(), expected.doc_len[j][valid].tolist()))
        if got != want:
            mismatches += 1
            if mismatches <= 5:
                first = next(i for i, (a, b) in enumerate(zip(got + [None] * len(want), want + [None] * len(got))) if a != b)
                print(f"query {qid}: rank {first + 1} differs: got {got[first:first + 3]}, expected {want[first:first + 3]}", file=sys.stderr)
    print(
        f"verify: {len(sample) - mismatches}/{len(sample)} sampled queries identical to the NumPy reference "
        f"(k={k}, {index.n_docs} docs, reference {reference_s:.1f} s)"
    )
    return 0 if mismatches == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
