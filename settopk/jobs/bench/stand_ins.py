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


#: name -> (generator of the lines, SHA-1 of the file it writes)
STAND_INS = {
    "clickstream": (_clickstream, "e6ca30fb009ebf577be3f1b40c40fa1194505092"),
    "kosarak": (_kosarak, "aea5b6fd7baa88b634b167b7b3364e0e40152cac"),
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
