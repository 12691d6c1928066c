"""The numba helpers of the CPU target's generated code, defined once per process.

The scalar templates (``scalar.TEMPLATES``, ``scalar.CPU_TEMPLATES``) call these where numba's
own operation differs from NumPy's (NaN-propagating extrema, floor division and remainder,
shifts, wrapping int64 arithmetic, complex ordering, division and absolute value). A generated
module imports only those it calls (see ``cpu._helper_imports``): numba's dispatchers are never
freed, so defining the helpers in every module kept a copy per compiled graph alive for good.

Imported by generated code only (it imports numba).
"""

import numba
import numpy as np
from numba.core.compiler import CompilerBase, DefaultPassBuilder
from numba.extending import intrinsic

from tracekit.backends import helpers as _shared
from tracekit.backends.scalar import _fma

# the helpers both targets share (tracekit/backends/helpers.py), compiled for the CPU
_inline = numba.njit(inline="always")
_maximum = _inline(_shared._maximum)
_minimum = _inline(_shared._minimum)
_fmax = _inline(_shared._fmax)
_fmin = _inline(_shared._fmin)
_lshift = _inline(_shared._lshift)
_wadd = _inline(_shared._wadd)
_wsub = _inline(_shared._wsub)
_wmul = _inline(_shared._wmul)
_wneg = _inline(_shared._wneg)
_wabs = _inline(_shared._wabs)
_ireciprocal = _inline(_shared._ireciprocal)
_iremainder = _inline(_shared._iremainder)
_rshift = _inline(_shared._rshift)
_ifloor_divide = _inline(_shared._ifloor_divide)
_cdiv = _inline(_shared._cdiv)
_creciprocal = _inline(_shared._creciprocal)
_csign = _inline(_shared._csign)
_cge = _inline(_shared._cge)
_cle = _inline(_shared._cle)
_cgt = _inline(_shared._cgt)
_clt = _inline(_shared._clt)
_cmaximum = _inline(_shared._cmaximum)
_cminimum = _inline(_shared._cminimum)
_cfmax = _inline(_shared._cfmax)
_cfmin = _inline(_shared._cfmin)


@numba.njit(inline="always")
def _floor_divide(a, b):
    return np.floor_divide(a, b)


@numba.njit(inline="always")
def _remainder(a, b):
    return np.remainder(a, b)


@numba.njit
def _ipow(a, b, one):
    if b < 0:
        raise ValueError("Integers to negative integer powers are not allowed.")
    r = np.uint64(one)
    x = np.uint64(a)  # unsigned: the low bits of the products, wrapped as NumPy's
    while b:
        if b & 1:
            r = r * x
        x = x * x
        b >>= 1
    return r


@numba.njit(inline="always")
def _fdivmod(a, b, one):
    # NumPy's npy_divmod for floats: (floor quotient, Python-style remainder)
    zero = one - one
    mod = np.fmod(a, b)
    if not b:
        return a / b, mod
    div = (a - mod) / b
    if mod:
        if (b < zero) != (mod < zero):
            mod = mod + b
            div = div - one
    else:
        mod = np.copysign(zero, b)
    if div:
        floordiv = np.floor(div)
        if div - floordiv > one / (one + one):
            floordiv = floordiv + one
    else:
        floordiv = np.copysign(zero, a / b)
    return floordiv, mod


@numba.njit(inline="always")
def _ffloor_divide(a, b, one):
    if not b:
        return a / b
    return _fdivmod(a, b, one)[0]


@numba.njit(inline="always")
def _fremainder(a, b, one):
    if not b:
        return np.fmod(a, b)
    return _fdivmod(a, b, one)[1]


@numba.njit(inline="always")
def _uremainder(a, b):
    if b == 0:
        return a - a
    return a % b


@numba.njit(inline="always")
def _ufloor_divide(a, b):
    if b == 0:
        return a - a
    return a // b


@numba.njit(inline="always")
def _cabs(z, one):
    # NumPy's SIMD complex absolute: larger * sqrt(fma(ratio, ratio, 1))
    re = abs(z.real)
    im = abs(z.imag)
    inf = one / (one - one)
    if re == inf or im == inf:
        return inf
    if re != re or im != im:
        return re + im
    larger = re if re > im else im
    smaller = im if re > im else re
    if larger == 0:
        return larger
    ratio = smaller / larger
    return np.sqrt(_fma(ratio, ratio, one)) * larger


@numba.njit(inline="always")
def _cmul(a, b):
    # NumPy's SIMD complex multiply: fused multiply-adds
    ar = a.real
    ai = a.imag
    br = b.real
    bi = b.imag
    return complex(_fma(ar, br, -(ai * bi)), _fma(ar, bi, ai * br))


@intrinsic
def _call_at(typingctx, address, lo, hi, operands):
    """``f(lo, hi, *operands)`` for the numba function at ``address`` (an int64: a compiled
    overload's entry point, whose argument types are exactly these and whose result is an
    int64), called with numba's calling convention and without linking its code in
    (``drivers.py``)."""
    from numba.core import cgutils, types

    arg_types = (lo, hi, *operands.types)

    def codegen(context, builder, signature, args):
        target, lo_value, hi_value, packed = args
        values = [lo_value, hi_value]
        values += [builder.extract_value(packed, i) for i in range(len(operands.types))]
        fnty = context.call_conv.get_function_type(types.int64, arg_types)
        pointer = builder.inttoptr(target, fnty.as_pointer())
        status, result = context.call_conv.call_function(
            builder, pointer, types.int64, arg_types, values
        )
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return result

    return types.int64(address, lo, hi, operands), codegen


@intrinsic
def _stacked(typingctx, operands):
    """The address (an int64) of a copy of the tuple ``operands`` on the caller's stack: valid
    until the caller returns (``drivers.py`` hands it to a driver it calls and waits for)."""
    from numba.core import cgutils, types

    def codegen(context, builder, signature, args):
        slot = cgutils.alloca_once_value(builder, args[0])
        return builder.ptrtoint(slot, context.get_value_type(types.int64))

    return types.int64(operands), codegen


@intrinsic
def _unstacked(typingctx, address, operands):
    """The tuple of type ``operands`` (a ``TypeRef``) that :func:`_stacked` put at ``address``,
    its arrays' references counted again, as numba's result."""

    tuple_type = operands.instance_type

    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], context.get_value_type(tuple_type).as_pointer())
        value = builder.load(pointer)
        context.nrt.incref(builder, tuple_type, value)
        return value

    return tuple_type(address, operands), codegen


@intrinsic
def _gemm_at(typingctx, address, a, b, out, row, rows, col, cols):
    """``out[row : row + rows, col : col + cols] = a[row : row + rows] @ b[:, col : col + cols]``
    for C-contiguous matrices of one dtype, through the Fortran ``?gemm`` at ``address`` (an
    int64: SciPy's ``cython_blas``, :mod:`.matmul_threads`). Row-major ``a @ b`` is
    column-major ``b.T @ a.T``: that product is the one asked of the Fortran routine, its
    blocks addressed by their first element and the matrices' leading dimensions."""
    from llvmlite import ir
    from numba.core import cgutils, types

    def codegen(context, builder, signature, args):
        target, a_value, b_value, out_value, first_row, count, first_col, width = args
        i32, byte = ir.IntType(32), ir.IntType(8).as_pointer()
        arrays = [
            context.make_array(ty)(context, builder, value)
            for ty, value in zip((a, b, out), (a_value, b_value, out_value))
        ]
        inner = builder.extract_value(arrays[0].shape, 1)
        lead = builder.extract_value(arrays[1].shape, 1)  # b's and out's columns
        block_a = builder.gep(arrays[0].data, [builder.mul(first_row, inner)])
        block_b = builder.gep(arrays[1].data, [first_col])
        first_out = builder.add(builder.mul(first_row, lead), first_col)
        block_out = builder.gep(arrays[2].data, [first_out])

        def slot(value):
            return builder.bitcast(cgutils.alloca_once_value(builder, value), byte)

        def int_slot(value):
            return slot(builder.trunc(value, i32))

        def pointer(value):
            return builder.bitcast(value, byte)

        no_transpose = slot(ir.Constant(ir.IntType(8), ord("N")))
        one, zero = (context.get_constant(a.dtype, v) for v in (1, 0))
        arguments = [no_transpose, no_transpose, int_slot(width), int_slot(count)]
        arguments += [int_slot(inner), slot(one), pointer(block_b), int_slot(lead)]
        arguments += [pointer(block_a), int_slot(inner), slot(zero), pointer(block_out)]
        arguments += [int_slot(lead)]
        fnty = ir.FunctionType(ir.VoidType(), [byte] * len(arguments))
        builder.call(builder.inttoptr(target, fnty.as_pointer()), arguments)
        return context.get_dummy_value()

    signature = types.none(address, a, b, out, types.int64, types.int64, types.int64, types.int64)
    return signature, codegen


class _NoAliasPipeline(CompilerBase):
    """numba's nopython pipeline with the function's pointer arguments (its arrays' data)
    marked ``noalias``, as numba marks a ``prange`` loop's body where it finds no aliases: a
    chunk kernel (``emit_cpu.KernelSource.chunk``) is that body, and without the mark LLVM
    vectorizes its loops only behind run-time checks of every pair of arrays, or not at all
    where the pairs are too many."""

    def define_pipelines(self):
        self.state.flags.noalias = True
        return [DefaultPassBuilder.define_nopython_pipeline(self.state)]


class _DrivenPipeline(_NoAliasPipeline):
    """:class:`_NoAliasPipeline` for a chunk kernel that only the driver calls, by address
    (``drivers.py``): without the function that unboxes its arguments from Python objects, nor
    the one C code would call. numba writes both for every function, and LLVM optimised the
    first at the price of a function per array: 0.4 s of isoneutral's kernel of 38 arrays.
    Its dispatcher cannot call it (``drivers.chunk_driver`` calls a copy with them where it
    must)."""

    def define_pipelines(self):
        self.state.flags.no_cpython_wrapper = True
        self.state.flags.no_cfunc_wrapper = True
        return super().define_pipelines()
