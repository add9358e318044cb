"""What the bit-sliced index loads and uploads: its compiled kernels by short name, a shard's sets
copied to the device, and the checks a host SetBatch passes first (CuPy imported inside the functions).

The kernels are in ``bitslice_topk.cu`` beside this file, compiled once per device by
:mod:`settopk.kernels.cuda.modules`; :class:`settopk.kernels.cuda.index.CupyShardIndex` uses all three.
"""

from __future__ import annotations

import numpy as np

from ..sets import MAX_VOCAB, NARROW_VOCAB, SetBatch
from .modules import load_kernels

__all__ = ["bitslice_kernels", "check_set_batch", "upload_sets"]

_SOURCE = "bitslice_topk.cu"
# (queries per block, any score, counter planes): Braun-Blanquet has a kernel of its own on 8 planes
# (see count_emit's kAnyScore); 13 planes (max_len above 255) take the score at run time.
_COUNT_KERNELS = {
    (32, False, 8): "settopk::count_emit<32, unsigned int, false, 8>",
    (16, False, 8): "settopk::count_emit<16, unsigned short, false, 8>",
    (32, True, 8): "settopk::count_emit<32, unsigned int, true, 8>",
    (16, True, 8): "settopk::count_emit<16, unsigned short, true, 8>",
    (32, True, 13): "settopk::count_emit<32, unsigned int, true, 13>",
    (16, True, 13): "settopk::count_emit<16, unsigned short, true, 13>",
}
_SELECT_KERNELS = {8: "settopk::select_topk<8>", 13: "settopk::select_topk<13>"}
# The layout's build by id type: uint16 ids, or a wide shard's (uint32, below 2**24).
_BUILD_KERNELS = {np.dtype(np.uint16): "settopk::build_layout<unsigned short>",
                  np.dtype(np.uint32): "settopk::build_layout<unsigned int>"}
# A wide shard's postings build, by the dtype of its cursors into the postings (wide.WidePostings).
_LAYOUT_POSTINGS_KERNELS = {np.dtype(np.uint32): "settopk::layout_postings<unsigned int>",
                            np.dtype(np.uint64): "settopk::layout_postings<unsigned long long>"}
_OTHER_KERNELS = ("settopk::remap_layout", "settopk::decode_topk")

def bitslice_kernels(device_id: int) -> dict:
    """The compiled kernels for ``device_id`` by short name: ``build_layout_uint16`` (and
    ``_uint32``) by id type; ``count32_8``/``count16_8`` for Braun-Blanquet and
    ``count32_any_8``, ``count16_any_8``, ``count32_any_13``, ``count16_any_13`` for any score;
    ``select_topk_8``/``_13`` by counter planes; ``remap_layout``, ``decode_topk``; ``layout_postings``, a
    dict of the build's kernels by cursor dtype (uint32, uint64)."""
    names = (list(_COUNT_KERNELS.values()) + list(_SELECT_KERNELS.values()) + list(_BUILD_KERNELS.values())
             + list(_LAYOUT_POSTINGS_KERNELS.values()) + list(_OTHER_KERNELS))
    module = load_kernels(_SOURCE, names, device_id)
    out = {name.split("::")[-1]: module[name] for name in _OTHER_KERNELS}
    out["layout_postings"] = {dtype: module[name] for dtype, name in _LAYOUT_POSTINGS_KERNELS.items()}
    out.update({f"build_layout_{dtype.name}": module[name] for dtype, name in _BUILD_KERNELS.items()})
    out.update({f"select_topk_{planes}": module[name] for planes, name in _SELECT_KERNELS.items()})
    for (queries, any_score, planes), name in _COUNT_KERNELS.items():
        out[f"count{queries}" + ("_any" if any_score else "") + f"_{planes}"] = module[name]
    return out


def upload_sets(pieces: list, dtype):
    """Device CSR arrays ``(offsets int64, tokens of dtype)`` of the concatenation of host SetBatches.

    Each piece's ids go straight into their place in one device array (uint16 pieces of a uint32
    array widened on the GPU); the offsets are shifted on the host (8 bytes per doc)."""
    import cupy

    n_tokens = sum(len(p.tokens) for p in pieces)
    tokens = cupy.empty(n_tokens, dtype=dtype)
    host_offsets = [np.zeros(1, dtype=np.int64)]
    position = 0
    for piece in pieces:
        if len(piece.tokens):
            if piece.tokens.dtype == dtype:
                tokens[position : position + len(piece.tokens)].set(piece.tokens)
            else:
                tokens[position : position + len(piece.tokens)] = cupy.asarray(piece.tokens)
        host_offsets.append(piece.offsets[1:] + position)
        position += len(piece.tokens)
    return cupy.asarray(np.concatenate(host_offsets)), tokens


def check_set_batch(batch, what: str, max_len: int, vocab_size: int) -> None:
    """Raise ValueError unless ``batch`` is a host SetBatch with C-contiguous arrays and sets of <= max_len ids,
    of uint16 ids, or uint32 ids where ``vocab_size`` exceeds 65536.

    Id ranges are checked on the GPU after the upload (a host pass over the
    ids would cost more than the whole build).
    """
    if not isinstance(batch, SetBatch):
        raise ValueError(f"{what} must be a settopk.kernels.SetBatch, found {type(batch).__name__}")
    token_dtype = np.uint32 if batch.tokens.dtype == np.uint32 and vocab_size > NARROW_VOCAB else np.uint16
    if batch.tokens.dtype == np.uint32 and token_dtype == np.uint16:
        raise ValueError(f"{what} has uint32 token ids (up to {batch.id_bound - 1}) but vocab_size={vocab_size}: "
                         f"set vocab_size above every id (up to {MAX_VOCAB})")
    for name, array, dtype in (("offsets", batch.offsets, np.int64), ("tokens", batch.tokens, token_dtype)):
        if not isinstance(array, np.ndarray):
            raise ValueError(f"{what}.{name} must be a host numpy array, found {type(array).__name__}")
        if array.dtype != dtype or array.ndim != 1:
            raise ValueError(f"{what}.{name} must be 1-D {np.dtype(dtype)}, found {array.dtype} {array.shape}")
        if not array.flags.c_contiguous:
            raise ValueError(f"{what}.{name} must be C-contiguous")
