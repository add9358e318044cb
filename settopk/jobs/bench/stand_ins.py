"""Synthetic stand-ins for public set datasets the project does not ship (issue 46: the threshold
join is measured on other real shapes than RETAIL).

A bench config names one as ``real.dataset: stand-in:NAME``. The bench writes the FIMI file (one
set per line, space-separated ids) once, from a fixed seed, into ``synthetic.cache_dir``, and
reads it like any dataset. The same name always gives the same bytes (:data:`STAND_INS` records
each file's SHA-1), so the figures in ``docs/benchmarks.md`` can be rerun.

- ``clickstream``: 36,683 sets like a public click-stream dataset (the second dataset of issue
  46, not shipped). 4,200 sessions of one or two pages drawn Zipf(1.6) over 40 pages, the rest of
  ``lognormal(2.2, 1.25)`` draws (at most 699) over 6,000 items drawn Zipf(1.1). Longest 305 ids,
  2,633,970 pairs of identical sets: at Jaccard 0.9 every passing pair is one.
- ``kosarak``: 990,002 click-streams, the size of KOSARAK (FIMI repository). ``1 + lognormal(1.6,
  1.0)`` draws (at most 2,498) over 41,270 items drawn Zipf(0.75). Mean 8.6 ids, longest 605,
  1,355,412 pairs of identical sets.
- ``dblp``: long sets over a small vocabulary, the shape of DBLP's q-gram sets (Mann, Augsten,
  Bouros, PVLDB 2016, table 2: mean 82.7 tokens, 7,205 distinct). 100,000 sets: 89 % drawn from
  ``lognormal(ln 86 - 0.3, 0.75)`` lengths (at most 400) over 7,205 ids drawn Zipf(0.9), 1 % exact
  copies of an earlier set, 10 % near copies (2-30 % of its ids dropped, a tenth as many drawn).
  Mean 80 ids, longest 381.
- ``enron``: long sets over a large vocabulary, the shape of ENRON's e-mails (the same table: mean
  135 tokens, 1.1 M distinct). 100,000 sets as ``dblp`` but lengths around 135 (at most 3,000)
  over 1,100,000 ids drawn Zipf(1.05), 5 % exact and 15 % near copies. Mean 121 ids, longest
  2,030; ids past 2^16, read through a dictionary.
- ``bms``: short market baskets over a small vocabulary, the shape of BMS-POS (the same table:
  515,597 sets, mean 6.5, 1,657 distinct). 515,597 sets as ``dblp`` but lengths around 6.5 (at
  most 164) over 1,657 ids drawn Zipf(1.0), 10 % exact and 5 % near copies. Mean 5.9 ids,
  longest 101; 45.5 M pairs of identical sets (one basket of a single item is held 7,160 times), so
  every threshold's self-join has at least that many pairs (312 M at Jaccard 0.5).
- ``aol``: very short sets over a very large vocabulary, the shape of AOL's query log (the same
  table: 10.2 M sets, mean 3.0, 3.9 M distinct), at a fifth of its size: 2,000,000 sets as
  ``dblp`` but lengths around 3 (at most 245) over 3,873,246 ids drawn Zipf(0.9), 35 % exact and
  2 % near copies. Mean 2.6 ids, longest 100; about 531 M pairs of identical sets (a query of one
  word held 23,479 times): its self-join's pairs take tens of GB at any threshold.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["PREFIX", "STAND_INS", "stand_in_name", "stand_in_path"]

PREFIX = "stand-in:"


def _clickstream() -> list[str]:
    rng = np.random.default_rng(7)
    items = 6000
    w = 1 / np.arange(1, items + 1) ** 1.1
    w /= w.sum()
    pages = 1 / np.arange(1, 41) ** 1.6
    lines = []
    for _ in range(4200):  # the identical mass: sessions of one or two popular pages
        size = 1 if rng.random() < 0.7 else 2
        s: set = set()
        while len(s) < size:
            s.add(int(rng.choice(40, p=pages / pages.sum())))
        lines.append(sorted(s))
    for _ in range(36683 - 4200):
        size = int(min(699, max(1, rng.lognormal(2.2, 1.25))))
        lines.append(sorted(np.unique(rng.choice(items, size=size, p=w)).tolist()))
    rng.shuffle(lines)
    return [" ".join(map(str, s)) for s in lines]


def _kosarak() -> list[str]:
    rng = np.random.default_rng(11)
    n, items = 990002, 41270
    w = 1 / np.arange(1, items + 1) ** 0.75
    w /= w.sum()
    sizes = np.minimum(2498, np.maximum(1, (rng.lognormal(1.6, 1.0, n) + 1).astype(int)))
    draws = np.searchsorted(np.cumsum(w), rng.random(int(sizes.sum())))
    ends = np.cumsum(sizes)
    return [" ".join(map(str, np.unique(draws[e - s:e]))) for s, e in zip(sizes.tolist(), ends.tolist())]


def _long_sets(n: int, mean_len: float, max_len: int, n_items: int, zipf: float, copies: float, near: float,
               seed: int) -> list[str]:
    """``n`` sets of ``lognormal(ln mean_len - 0.3, 0.75)`` Zipf draws (at most ``max_len`` ids),
    a share ``copies`` of them exact copies of an earlier set and ``near`` near copies."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1 / np.arange(1, n_items + 1) ** zipf)
    cdf /= cdf[-1]
    items = rng.permutation(n_items)  # the popular ids scattered over the range

    def draw(size: int) -> np.ndarray:
        return items[np.minimum(np.searchsorted(cdf, rng.random(size)), n_items - 1)]

    lengths = np.clip(rng.lognormal(np.log(mean_len) - 0.3, 0.75, n).astype(int), 1, max_len)
    sets: list = []
    for length in lengths.tolist():
        u = rng.random()
        if sets and u < copies:
            sets.append(sets[rng.integers(len(sets))])
        elif sets and u < copies + near:
            base = sets[rng.integers(len(sets))]
            kept = base[rng.random(len(base)) > rng.uniform(0.02, 0.3)]
            sets.append(np.unique(np.concatenate([kept, draw(max(1, len(base) // 10))]))[:max_len])
        else:
            s = np.unique(draw(int(length * 1.3) + 2))
            sets.append(np.sort(rng.choice(s, length, replace=False)) if len(s) > length else s)
    return [" ".join(map(str, s.tolist())) for s in sets]


def _dblp() -> list[str]:
    return _long_sets(100_000, 86, 400, 7205, 0.9, 0.01, 0.10, 1)


def _enron() -> list[str]:
    return _long_sets(100_000, 135, 3000, 1_100_000, 1.05, 0.05, 0.15, 2)


def _bms() -> list[str]:
    return _long_sets(515_597, 6.5, 164, 1657, 1.0, 0.10, 0.05, 3)


def _aol() -> list[str]:
    return _long_sets(2_000_000, 3.0, 245, 3_873_246, 0.9, 0.35, 0.02, 4)


#: name -> (generator of the lines, SHA-1 of the file it writes)
STAND_INS = {
    "clickstream": (_clickstream, "e6ca30fb009ebf577be3f1b40c40fa1194505092"),
    "kosarak": (_kosarak, "aea5b6fd7baa88b634b167b7b3364e0e40152cac"),
    "dblp": (_dblp, "4c6af53a38af5d4ebba0d9bd78ddbc7644bf40c1"),
    "enron": (_enron, "1f38d9b113398cb92e3e5cafa752bff23cad69fc"),
    "bms": (_bms, "54e4a240346a526541d9f5d71c272d11184ac69d"),
    "aol": (_aol, "ce0966b7bad205b895341ecd0e8c3e90fc52c51c"),
}


def stand_in_name(dataset: str) -> str | None:
    """The stand-in ``real.dataset`` names (``"stand-in:NAME"`` -> ``"NAME"``); None for a path."""
    return dataset[len(PREFIX):] if dataset.startswith(PREFIX) else None


def stand_in_path(name: str, cache_dir: str) -> Path:
    """The stand-in's FIMI file under ``cache_dir``, written first where it is not there.

    Parameters
    ----------
    name : str
        A key of :data:`STAND_INS`.
    cache_dir : str
        The directory of generated inputs (``synthetic.cache_dir``; ``~`` expanded).

    Returns
    -------
    pathlib.Path
        ``cache_dir/stand-ins/NAME.dat``. A file is written whole under a temporary name and then
        renamed, so a run that stops midway leaves none behind.

    Raises
    ------
    ValueError
        If ``name`` is not a stand-in.
    RuntimeError
        If the written file's SHA-1 is not the recorded one (NumPy's generators changed).
    """
    if name not in STAND_INS:
        raise ValueError(f"real.dataset names stand-in {name!r}; the stand-ins are {sorted(STAND_INS)}")
    make, sha1 = STAND_INS[name]
    folder = Path(os.path.expanduser(cache_dir)) / "stand-ins"
    path = folder / f"{name}.dat"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    text = ("\n".join(make()) + "\n").encode()
    found = hashlib.sha1(text).hexdigest()
    if found != sha1:
        raise RuntimeError(f"stand-in {name!r} came out with SHA-1 {found}, expected {sha1}: this NumPy draws other "
                           "numbers from the same seed, so its figures would not be those of docs/benchmarks.md")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
