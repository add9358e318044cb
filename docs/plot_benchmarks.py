"""Plot settopk's search time against its baselines from docs/benchmarks.csv into docs/benchmarks.png.

Run from the repository root with matplotlib installed (it is not a dependency of settopk):

    python docs/plot_benchmarks.py

Numbers are never computed here: edit the CSV after a new `python -m settopk bench` run, then rerun this.
"""

from __future__ import annotations

import csv
import pathlib

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
METHODS = ["settopk (routing auto)", "settopk (routing scan)", "popc4", "spmm"]  # top to bottom of each group
COLORS = {"settopk (routing auto)": "#1b7837", "settopk (routing scan)": "#5aae61", "popc4": "#9970ab", "spmm": "#762a83"}


def read_rows(path: pathlib.Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def main() -> None:
    rows = read_rows(HERE / "benchmarks.csv")
    configs = list(dict.fromkeys(r["config"] for r in rows))
    times = {(r["config"], r["method"]): float(r["search_s"]) for r in rows}
    fig, ax = plt.subplots(figsize=(9, 4.2))
    bar_h = 0.8 / len(METHODS)
    labels_y, labels = [], []
    for i, config in enumerate(configs):
        for j, method in enumerate(METHODS):
            t = times.get((config, method))
            if t is None:
                continue
            y = i + (j - (len(METHODS) - 1) / 2) * bar_h
            ax.barh(y, t, height=bar_h * 0.9, color=COLORS[method], label=method if i == 0 else None)
            ax.text(t * 1.08, y, f"{t * 1e3:.1f} ms" if t < 0.1 else f"{t * 1e3:.0f} ms" if t < 1 else f"{t:.2f} s", va="center", fontsize=8)
        labels_y.append(i)
        labels.append(config)
    ax.set_xscale("log")
    ax.set_xlim(3e-3, 40)
    ax.set_yticks(labels_y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("search time, seconds (log scale; lower is better)")
    ax.set_title("2000 queries, k = 100, 7.85 M docs, one H200: settopk against its baselines", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(HERE / "benchmarks.png", dpi=120)


if __name__ == "__main__":
    main()
