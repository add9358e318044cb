"""Job: write a synthetic STI2-shaped corpus (``docs.parquet``, ``queries.parquet``).

    python -m settopk make-corpus --out-dir DIR --n-docs N --n-queries N --seed S \\
        [--id-dist zipf|uniform] [--zipf-s 1.0] [--vocab-size 50001] \\
        [--near-duplicate-fraction 0.5] [--max-len 128] [--token-type uint16|int64|string]
        [--token-offset N] [--length-law sti2|uniform|lognormal|retail] [--duplicate-fraction F]
        [--duplicate-zipf-s S] [--workers W]

Generation is local (no Ray): vectorised NumPy in a few threads. The files are the
same for the same arguments (``--workers`` aside, which changes only the speed).
"""

from __future__ import annotations

import argparse
import sys
import time

from . import add_version, prog_name
from .synthetic.spec import LENGTH_LAWS, TOKEN_TYPES
from .synthetic import GENERATOR_VERSION, SyntheticSpec, generate_docs, generate_queries, write_parquet

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of the job."""
    p = argparse.ArgumentParser(
        prog=prog_name("make-corpus"),
        description="Generate a synthetic corpus shaped like the STI2 data into DIR/docs.parquet and DIR/queries.parquet.",
    )
    add_version(p)
    p.add_argument("--out-dir", required=True, help="output directory (created if missing)")
    p.add_argument("--n-docs", type=int, required=True, help="number of docs (7853052 = the exact STI2 length histogram)")
    p.add_argument("--n-queries", type=int, required=True, help="number of queries")
    p.add_argument("--seed", type=int, default=0, help="seed of every random stream (default 0)")
    p.add_argument("--id-dist", choices=("zipf", "uniform"), default="zipf", help="law of token ids (default zipf)")
    p.add_argument("--zipf-s", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    p.add_argument("--vocab-size", type=int, default=50001,
                   help="ids lie in [0, vocab_size), at most 16777216; above 65536 use --token-type int64 or string (default 50001)")
    p.add_argument(
        "--near-duplicate-fraction", type=float, default=0.5,
        help="share of queries that perturb a random doc; they come first (default 0.5)",
    )
    p.add_argument("--max-len", type=int, default=128, help="most ids per set (default 128)")
    p.add_argument("--token-type", choices=TOKEN_TYPES, default="uint16",
                   help="how tokens are stored: the ids (uint16), id + offset as int64, or its decimal text (string) (default uint16)")
    p.add_argument("--token-offset", type=int, default=0, help="added to every id for int64 and string tokens, e.g. 1000000000000 (default 0)")
    p.add_argument("--length-law", choices=LENGTH_LAWS, default="sti2",
                   help="set lengths: the STI2 histogram (sti2), uniform in [0, max_len], NETFLIX-like lognormal "
                        "(mean 200, cut at max_len), or RETAIL's short baskets (retail: mean 10.3, 1 to 76) (default sti2)")
    p.add_argument("--duplicate-fraction", type=float, default=0.0,
                   help="share of docs that are exact copies of an earlier doc, in [0, 1) (default 0)")
    p.add_argument("--duplicate-zipf-s", type=float, default=1.0,
                   help="skew of the docs copied: the r-th original with p ~ 1 / r**s, so the first repeat most (default 1.0)")
    p.add_argument("--workers", type=int, default=None, help="threads (default: usable CPUs, at most 16); output does not depend on it")
    return p


def main(argv=None) -> int:
    """Run the job; returns the exit code (0 on success, 2 on bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        spec = SyntheticSpec(
            n_docs=args.n_docs,
            n_queries=args.n_queries,
            seed=args.seed,
            vocab_size=args.vocab_size,
            id_dist=args.id_dist,
            zipf_s=args.zipf_s,
            near_duplicate_fraction=args.near_duplicate_fraction,
            max_len=args.max_len,
            token_type=args.token_type,
            token_offset=args.token_offset,
            length_law=args.length_law,
            duplicate_fraction=args.duplicate_fraction,
            duplicate_zipf_s=args.duplicate_zipf_s,
        )
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2

    t0 = time.perf_counter()
    docs = generate_docs(spec, workers=args.workers)
    queries = generate_queries(spec, docs, workers=args.workers)
    t_gen = time.perf_counter() - t0
    t1 = time.perf_counter()
    docs_path, queries_path = write_parquet(docs, queries, args.out_dir, spec)
    t_write = time.perf_counter() - t1

    print(f"synthetic corpus (generator v{GENERATOR_VERSION}): {spec}")
    for name, path, batch in (("docs", docs_path, docs), ("queries", queries_path, queries)):
        lengths = batch.lengths
        mean = float(lengths.mean()) if len(lengths) else 0.0
        top = int(lengths.max()) if len(lengths) else 0
        print(
            f"wrote {path}: {batch.n_sets:,} {name}, {len(batch.tokens):,} ids, "
            f"length mean {mean:.2f} max {top}, {path.stat().st_size / 2**20:.1f} MiB"
        )
    if spec.n_queries:
        print(f"queries 0..{spec.n_near_duplicates - 1} are near-duplicates of docs, the rest random sets")
    print(f"generated in {t_gen:.1f} s, written in {t_write:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
