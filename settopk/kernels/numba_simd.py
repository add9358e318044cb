"""LLVM vector intrinsics of the compiled CPU kernels (:mod:`settopk.kernels.numba_kernels`; imports numba).

Counters and tables are C-contiguous uint64 arrays whose rows are :data:`WORDS`
words; each intrinsic loads and stores whole rows as one
``<8 x i64>`` vector, which LLVM lowers to AVX-512 (or pairs of AVX2, or SSE)
instructions of the machine that compiles them. The scan's counter array
``acc`` holds the carries (row 0) and the bit planes (row ``1 + b``: bit ``b``
of every counter).

The intrinsics are inlined into the cached functions of
:mod:`settopk.kernels.numba_kernels`, and Numba's disk cache tracks only the file that
defines a cached function: after editing this file, delete the ``*.nbi`` and
``*.nbc`` files of ``settopk/kernels/__pycache__``.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["WORDS", "at_least", "count1", "count8", "ctz", "prefetch", "ripple"]

WORDS = 8
"""uint64 words per vector: 512 queries per scan group."""
_VEC_T = ir.VectorType(ir.IntType(64), WORDS)


@intrinsic
def ctz(typingctx, src):
    """Trailing zero bits of a nonzero uint64 (LLVM ``cttz``)."""
    if not isinstance(src, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return src(src), codegen


@intrinsic
def prefetch(typingctx, arr, index):
    """Ask for the cache line of ``arr[index]`` (a 1-D C-contiguous array; any index: a prefetch does not fault)."""
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, value=args[0]).data
        i = context.cast(builder, args[1], sig.args[1], types.int64)
        ptr = builder.bitcast(builder.gep(data, [i]), ir.IntType(8).as_pointer())
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [
            ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(32), ir.IntType(32)]), "llvm.prefetch.p0")
        i32 = ir.IntType(32)
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.none(arr, index), codegen


def _load(builder, ptr):
    try:
        return builder.load(ptr, align=8, typ=_VEC_T)
    except TypeError:  # llvmlite without the typ argument (typed pointers)
        return builder.load(ptr, align=8)


def _row(context, builder, arrty, arr, row):
    """Pointer to row ``row`` (an i64 flat row index) of a C-contiguous uint64 array of WORDS columns."""
    data = context.make_array(arrty)(context, builder, value=arr).data
    ptr = builder.gep(data, [builder.mul(row, ir.Constant(ir.IntType(64), WORDS))], inbounds=True)
    return builder.bitcast(ptr, _VEC_T.as_pointer())


def _const_row(context, builder, arrty, arr, row):
    return _row(context, builder, arrty, arr, ir.Constant(ir.IntType(64), row))


def _int_row(context, builder, sig, args, i, j):
    """Pointer to row ``args[j]`` (an integer argument) of the array ``args[i]``."""
    return _row(context, builder, sig.args[i], args[i], context.cast(builder, args[j], sig.args[j], types.int64))


def _any(builder, v):
    """OR of the words of a vector (an i64)."""
    out = builder.extract_element(v, ir.Constant(ir.IntType(32), 0))
    for i in range(1, WORDS):
        out = builder.or_(out, builder.extract_element(v, ir.Constant(ir.IntType(32), i)))
    return out


def _csa(builder, a, b, c):
    """Carry-save adder: ``a + b + c == low + 2 high`` bit by bit; returns (high, low)."""
    u = builder.xor(a, b)
    return builder.or_(builder.and_(a, b), builder.and_(u, c)), builder.xor(u, c)


@intrinsic
def count8(typingctx, table, acc, s0, s1, s2, s3, s4, s5, s6, s7):
    """Add table rows ``s0 .. s7`` to planes 0-2 of ``acc`` (Harley-Seal: 7 carry-save adders); the carries
    into plane 3 go to ``acc`` row 0. Returns their OR (0: nothing to ripple)."""
    def codegen(context, builder, sig, args):
        a = []
        for i in range(8):
            s = context.cast(builder, args[2 + i], sig.args[2 + i], types.int64)
            a.append(_load(builder, _row(context, builder, sig.args[0], args[0], s)))
        rows = [_const_row(context, builder, sig.args[1], args[1], r) for r in range(4)]
        ones, twos, fours = (_load(builder, rows[r]) for r in (1, 2, 3))
        twos_a, ones = _csa(builder, ones, a[0], a[1])
        twos_b, ones = _csa(builder, ones, a[2], a[3])
        fours_a, twos = _csa(builder, twos, twos_a, twos_b)
        twos_a, ones = _csa(builder, ones, a[4], a[5])
        twos_b, ones = _csa(builder, ones, a[6], a[7])
        fours_b, twos = _csa(builder, twos, twos_a, twos_b)
        eights, fours = _csa(builder, fours, fours_a, fours_b)
        for r, v in ((1, ones), (2, twos), (3, fours), (0, eights)):
            builder.store(v, rows[r], align=8)
        return _any(builder, eights)

    return types.uint64(table, acc, s0, s1, s2, s3, s4, s5, s6, s7), codegen


@intrinsic
def count1(typingctx, table, acc, s):
    """Add table row ``s`` to planes 0-2 of ``acc``; the carries into plane 3 go to row 0. Returns their OR."""
    def codegen(context, builder, sig, args):
        c = _load(builder, _int_row(context, builder, sig, args, 0, 2))
        for r in (1, 2, 3):
            p = _const_row(context, builder, sig.args[1], args[1], r)
            v = _load(builder, p)
            builder.store(builder.xor(v, c), p, align=8)
            c = builder.and_(v, c)
        builder.store(c, _const_row(context, builder, sig.args[1], args[1], 0), align=8)
        return _any(builder, c)

    return types.uint64(table, acc, s), codegen


@intrinsic
def ripple(typingctx, acc, row):
    """Add the carries (``acc`` row 0) into row ``row``; the carries out replace row 0. Returns their OR."""
    def codegen(context, builder, sig, args):
        p0 = _const_row(context, builder, sig.args[0], args[0], 0)
        pr = _int_row(context, builder, sig, args, 0, 1)
        c, v = _load(builder, p0), _load(builder, pr)
        t = builder.and_(v, c)
        builder.store(builder.xor(v, c), pr, align=8)
        builder.store(t, p0, align=8)
        return _any(builder, t)

    return types.uint64(acc, row), codegen


@intrinsic
def at_least(typingctx, acc, planes, first, n_planes):
    """Row 0 of ``acc`` = bits of the counters (planes in rows ``1 .. n_planes``) that are >= the least
    overlaps in rows ``first .. first + n_planes - 1`` of ``planes`` (no borrow out of counter - need:
    ``borrow' = (~c & t) | ((~c | t) & borrow)``). Returns the OR of the result."""
    def codegen(context, builder, sig, args):
        first_row = context.cast(builder, args[2], sig.args[2], types.int64)
        n = context.cast(builder, args[3], sig.args[3], types.int64)
        borrow = cgutils.alloca_once_value(builder, ir.Constant(_VEC_T, None))
        full = ir.Constant(_VEC_T, [ir.Constant(ir.IntType(64), -1)] * WORDS)
        with cgutils.for_range(builder, n) as loop:
            i = loop.index
            c = _load(builder, _row(context, builder, sig.args[0], args[0], builder.add(i, ir.Constant(i.type, 1))))
            t = _load(builder, _row(context, builder, sig.args[1], args[1], builder.add(first_row, i)))
            nc = builder.xor(c, full)
            b = builder.load(borrow)
            builder.store(builder.or_(builder.and_(nc, t), builder.and_(builder.or_(nc, t), b)), borrow)
        hit = builder.xor(builder.load(borrow), full)
        builder.store(hit, _const_row(context, builder, sig.args[0], args[0], 0), align=8)
        return _any(builder, hit)

    return types.uint64(acc, planes, first, n_planes), codegen
