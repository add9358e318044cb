"""The loader of the CUDA sources (settopk.kernels.cuda.modules): each source compiled once per device, from
any number of threads, with the shared header; and the sources' layout, checked without a GPU."""

from __future__ import annotations

import re
import threading

import pytest

from settopk.kernels.cuda import modules, postings

# the names GpuPostings compiles: whichever test loads the source first must compile all of them
_POSTINGS = (*postings._EMIT.values(), postings._COST)


def test_every_source_includes_the_shared_header_and_none_repeats_its_code():
    sources = sorted(modules.SOURCE_DIR.glob("*.cu"))
    assert [s.name for s in sources] == ["bitslice_topk.cu", "join.cu", "postings_topk.cu"]
    header = (modules.SOURCE_DIR / "common.cuh").read_text()
    assert "#pragma once" in header
    shared = re.findall(r"__device__ __forceinline__ [\w ]+? (\w+)\(", header)
    assert {"least_overlap", "need_overlap", "encode_candidate", "score_den"} <= set(shared)
    for source in sources:
        text = source.read_text()
        # the scoring kernels include it; the join's kernel uses none of its code (no score, no key)
        uses = [name for name in shared if re.search(rf"\b{name}\(", text)]
        assert '#include "common.cuh"' in text or (source.name == "join.cu" and not uses), (source.name, uses)
        for name in shared:  # defined once, in the header
            assert not re.search(rf"__device__ __forceinline__ [\w ]+? {name}\(", text), (source.name, name)


@pytest.mark.gpu
def test_a_source_is_compiled_once_per_device_from_many_threads():
    import cupy

    from settopk.kernels.cuda.loading import bitslice_kernels as _kernels

    device = cupy.cuda.Device().id
    results, errors = [], []

    def load():
        try:
            results.append(modules.load_kernels("postings_topk.cu", _POSTINGS, device))
            results.append(_kernels(device))
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # this directory's sources, once each (other tests may have compiled sources from elsewhere)
    compiled = [source for source, dev in modules._modules if dev == device and "/" not in source]
    assert {"bitslice_topk.cu", "postings_topk.cu"} <= set(compiled)  # join.cu too where a join test ran here
    assert set(compiled) <= {path.name for path in modules.SOURCE_DIR.glob("*.cu")}
    first = modules._modules[("postings_topk.cu", device)][1]
    again = modules.load_kernels("postings_topk.cu", _POSTINGS[:1], device)  # a subset of its names
    assert modules._modules[("postings_topk.cu", device)][1] is first and list(again) == [_POSTINGS[0]]
    with pytest.raises(ValueError, match="without"):
        modules.load_kernels("postings_topk.cu", ("settopk::select_topk",), device)
