"""SIMD-friendly scalar elementary functions for numba-generated kernels.

Numba lowers ``np.exp``/``np.tanh``/... inside ``@njit`` loops to scalar libm
calls, which block LLVM's loop vectoriser.  The functions here are written as
straight-line, branch-free arithmetic (range reduction + minimax polynomial,
selects instead of branches, no libm calls), so that a loop calling them is
still vectorised (AVX2 ``<8 x float>`` / AVX-512 ``<16 x float>``) after LLVM
inlines them into the caller.

Every public function is a ``numba.njit`` dispatcher taking one scalar of its
dtype (``power`` takes two) and is meant to be called from other njit code::

    import numpy as np, numba
    from tracekit.backends import fastmath as fm

    @numba.njit
    def gelu(x, out):
        for i in range(x.shape[0]):
            out[i] = 0.5 * x[i] * (1 + fm.tanh_f32(np.float32(0.7978846) * x[i]))

Code generators use :data:`FAST_MATH`, :func:`namespace` and :func:`name_for`, and
:func:`power_const_name` for ``x ** c`` with a constant ``c`` that is an integer or a
multiple of 1/4 (a multiplication chain, square roots and a reciprocal instead of
``exp(c*log x)``).

Accuracy
--------
Every docstring states ``max error vs correctly rounded: M ulp``, the promise
of this module, measured and asserted by ``tests/backends/test_fastmath.py``.
Distances are counted in representable numbers between two results, over 2**20
random bit patterns of the dtype, dense sweeps of the interesting ranges and
the special values.  "Correctly rounded" is the float32 function evaluated in
float64, or the float64 one in x87 long double (with mpmath where the platform
has no wider long double, and for ``erf``), then rounded.  The bound holds on
every CPU with FMA: every function is written with explicit fused multiply-adds,
so no compiler's contraction choice reaches it.  NumPy is not exact itself and
its error depends on the CPU: its AVX-512 and AVX2 loops and libm are different
code (with NumPy 2.4 on AVX-512 its float32 ``exp``/``log``/``exp2``/``log10``/
``tan`` are up to 3 ulp off; on an AVX2 machine its float64 ``log10`` and
``cosh`` and float32 ``sinh`` were 1 ulp off where these are correctly
rounded). So the distance from NumPy is at most M plus NumPy's own error on the
machine at hand, which the tests measure there.
Where NumPy has no such function the reference is stated (``erf``: Python's
``math.erf``; ``sigmoid``: ``1/(1+np.exp(-x))`` evaluated in a wider type).

Special values follow NumPy: nan in -> nan out; +-inf, overflow (inf) and
underflow (0 or a correctly rounded subnormal) as NumPy; subnormal inputs are
handled; signed zeros are preserved where NumPy preserves them (``expm1``,
``log1p``, ``tanh``, ``sin``, ``tan``, ``erf``, ``sinh``, ``power`` ...).

Implementation notes
--------------------
* Inlining: the public functions are ``njit(forceinline=True)``: compiled once
  (per process and signature) and marked ``alwaysinline`` for LLVM, which then
  inlines the compiled body into the calling loop whatever its size (the
  default inliner threshold refuses e.g. ``sin``/``power``, leaving a call that
  blocks vectorisation).  Private helpers are plain Python functions whose
  statements are written into each public function's source before numba
  sees it (``_flatten``), so they cost no compilation units and no numba IR
  inlining.
* All arithmetic is IEEE (``fastmath=False``); tricks such as the
  ``(x + 1.5*2**23) - 1.5*2**23`` rounding rely on it.  Divisions go through a
  tiny ``fdiv`` intrinsic, so the caller's ``error_model`` cannot add a
  ZeroDivisionError branch.
* ``llvm.fma`` is used for polynomial evaluation and error-free products.  On
  CPUs without FMA hardware LLVM falls back to a (correct but slow, scalar)
  libm ``fma`` call; every x86-64 CPU since 2013 (Haswell/Piledriver) has FMA.
* Float <-> int reinterpretation uses a tiny LLVM ``bitcast`` intrinsic; float
  -> int *conversions* are never applied to values that may be nan/inf/huge
  (they are undefined in LLVM).
* ``sin``/``cos``/``tan``: Cody-Waite reduction up to ``|x| <= 2**20`` (float32: ``sin``
  and ``cos`` by pi in float64, ``tan`` by pi/2 in three float32 parts) and ``|x| <= 3e6``
  (float64, by pi/2 in 3x32+53 bits),
  Payne-Hanek beyond, so every finite input is accurate (the hardest double,
  6381956970095103 * 2**797, is in the tests).  The float32 Payne-Hanek uses
  integer arithmetic on four 64-bit words of 2/pi; the float64 one reads four
  53-bit chunks of 2/pi from a table indexed by the exponent (vector gathers).
  The vectoriser if-converts, so the large-argument path is always evaluated
  (two thirds of ``sin_f64``'s time): kernels call ``sin_near_*``/``cos_near_*``/
  ``tan_near_*`` (:func:`near_names`), which leave it out, count the arguments
  ``trig_far_*`` says they miss, and compute again with the full functions where
  there were any.
* float32 ``log2, log10, sinh, cosh, arctan, arcsin, arccos`` are float32 code throughout
  (float32 polynomials; where one rounding too many would cost an ulp, a float32 pair carries
  the error to the last sum); float32 ``power, arctan2, arcsinh, arccosh, arctanh, cbrt,
  hypot, logaddexp`` and ``power_const`` are evaluated with the float64 kernels and rounded
  once (accurate, about half the float32 speed); float32 ``sin`` and ``cos`` reduce by pi in
  float64 (``x - n*pi`` exact in its first part) and evaluate one odd polynomial in float64
  (twice the speed of the float32 pair reduction with both polynomials that ``tan`` keeps: it
  reduces in float32 and evaluates only the polynomials in float64); float32 ``exp2`` splits
  off the integer part exactly and evaluates ``exp`` of the rest times ln2 as a float32 pair.
* ``logaddexp`` is NumPy's formula ``max + log1p(exp(-|x-y|))``, which cancels near the zero
  of ``e**x + e**y = 1`` (NumPy's float32 loop is thousands of ulps off there). float32
  evaluates it in float64 and is within an ulp down to results of 2**-26; float64 promises
  ulps only for results of magnitude 1 and more, and below an absolute error of 2**-51
  (rounding the sum, log1p's and exp's ulps), as NumPy's own loop: within ulps everywhere
  would need exp and log1p in double-double.

Only numpy and numba (with its llvmlite dependency) are imported.
"""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import linecache
import marshal
import os
import sys
import threading
from collections.abc import Mapping
from types import FunctionType

import numpy as np
from llvmlite import ir  # numba's own code-generation dependency
from numba import njit, types
from numba.extending import intrinsic

__all__ = [
    "FAST_MATH",
    "POWER_CONST",
    "namespace",
    "name_for",
    "power_const_name",
    "near_names",
    "OPS",
]

_OPTS = dict(error_model="numpy", fastmath=False, cache=False, nogil=True, forceinline=True)


def _jit(fn):
    """Public functions: one compilation unit each, LLVM-inlined into callers. Recorded here;
    :func:`_dispatcher` makes the numba function on first use."""
    _PUBLIC[fn.__name__] = fn
    return fn


_PUBLIC: dict = {}  # public name -> its Python function
_HELPERS: dict = {}  # helper function -> its source, or None for a def in this file


def _helper(fn, source=None):
    """Private helpers: plain Python functions whose bodies :func:`_flatten` writes into the
    functions calling them (``source``: the source of a generated one)."""
    _HELPERS[fn] = source
    return fn


def _flatten(fn):
    """``fn`` recompiled with each call of a helper replaced by the helper's statements (its
    names renamed apart, its arguments bound by assignments, its return value substituted for
    the call), recursively: one flat function, so numba compiles no helper and inlines no IR
    (numba's IR inlining was about half of a first compile of ``sin_f64``). Helpers are pure
    and total, so the order they are evaluated in, and whether a conditional expression's
    other branch is, changes no result."""
    tree = _function_def(fn)
    tree.decorator_list = []
    tree.body = _Flattener(fn.__globals__).body(tree.body)
    module = ast.fix_missing_locations(ast.Module([tree], []))
    defined: dict = {}
    exec(compile(module, fn.__code__.co_filename, "exec"), fn.__globals__, defined)  # noqa: S102
    flat = defined[fn.__name__]
    flat.__doc__ = fn.__doc__
    return flat


def _function_def(fn) -> ast.FunctionDef:
    """A new syntax tree of ``fn``'s definition, at its lines in its file."""
    source, first = _source(fn)
    tree = ast.parse(source).body[0]
    return tree if first == 1 else ast.increment_lineno(tree, first - 1)


@functools.cache
def _source(fn) -> tuple:
    """(``fn``'s source, its first line): its own lines of its file, read off its code object
    (from its first decorator to the end of its last statement), not the whole file parsed."""
    if _HELPERS.get(fn) is not None:
        return _HELPERS[fn], 1
    code = fn.__code__
    last = max(end for _, end, _, _ in code.co_positions() if end is not None)
    lines = linecache.getlines(code.co_filename)
    return "".join(lines[code.co_firstlineno - 1 : last]), code.co_firstlineno


class _Selects(ast.NodeTransformer):
    """``a if c else b``, ``a and b``, ``a or b`` as :func:`_select` calls: no branches, so
    numba's passes see one block instead of three per expression, and the vectoriser a select
    either way. Both sides are evaluated, which the pure and total arithmetic here allows; an
    array read (which could fall outside its table) keeps its branch."""

    def visit_IfExp(self, node):
        self.generic_visit(node)
        if _reads_memory(node.body) or _reads_memory(node.orelse):
            return node
        return _select_call(node.test, node.body, node.orelse, node)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        if any(_reads_memory(v) for v in node.values[1:]):
            return node
        *firsts, out = node.values
        for v in reversed(firsts):  # a and b: b if a else a; a or b: a if a else b
            both = (out, v) if isinstance(node.op, ast.And) else (v, out)
            out = _select_call(v, *both, node)
        return out


def _reads_memory(node) -> bool:
    return any(isinstance(n, ast.Subscript) for n in ast.walk(node))


def _select_call(test, a, b, where):
    call = ast.Call(ast.Name("_select", ast.Load()), [test, a, b], [])
    return ast.copy_location(call, where)


class _Calls(ast.NodeTransformer):
    """Helper calls in an expression replaced by their return values (:meth:`_Flattener.inline`,
    their statements appended to ``before``)."""

    def __init__(self, flattener, before: list):
        self.flattener, self.before = flattener, before

    def visit_Call(self, call):
        self.generic_visit(call)  # arguments first
        fn = self.flattener.scope.get(call.func.id) if isinstance(call.func, ast.Name) else None
        return self.flattener.inline(fn, call, self.before) if fn in _HELPERS else call


class _Flattener:
    """Writes helpers' bodies into a statement list (:func:`_flatten`)."""

    def __init__(self, scope: dict):
        self.scope = scope
        self.inlined = 0

    def body(self, statements) -> list:
        out = []
        for s in statements:
            if isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant):
                continue  # a docstring
            before: list = []
            if isinstance(s, ast.If):
                s.test = self.expr(s.test, before)
                s.body, s.orelse = self.body(s.body), self.body(s.orelse)
            elif isinstance(s, (ast.Assign, ast.Return, ast.Expr)):
                s.value = self.expr(s.value, before)
            else:
                raise TypeError(f"fastmath: no flattening of {type(s).__name__} (line {s.lineno})")
            out += before + [s]
        return out

    def expr(self, node, before: list):
        return _Selects().visit(_Calls(self, before).visit(node))

    def inline(self, fn, call, before: list):
        """The helper ``fn``'s statements appended to ``before``; its return value."""
        tree = _function_def(fn)
        *statements, last = tree.body
        params = [a.arg for a in tree.args.args]
        nodes = list(ast.walk(tree))
        returns = [n for n in nodes if isinstance(n, ast.Return)]
        if returns != [last] or len(call.args) != len(params) or call.keywords:
            raise TypeError(
                f"fastmath: {fn.__name__} must take positional arguments and end in its only return"
            )
        self.inlined += 1
        prefix = f"{fn.__name__}_{self.inlined}_"
        names = [n for n in nodes if isinstance(n, ast.Name)]
        local = set(params) | {n.id for n in names if isinstance(n.ctx, ast.Store)}
        for n in names:
            if n.id in local:
                n.id = prefix + n.id
        for name, value in zip(params, call.args):
            target = ast.Name(prefix + name, ast.Store())
            before.append(ast.copy_location(ast.Assign([target], value), call))
        before += self.body(statements)
        return self.expr(last.value, before)


# ---------------------------------------------------------------------------
# intrinsics: bit casts and fused multiply-add
# ---------------------------------------------------------------------------


@intrinsic
def _as_int(typingctx, x):
    """Reinterpret the bits of a float32/float64 as int32/int64."""
    if isinstance(x, types.Float) and x.bitwidth in (32, 64):
        rt = types.int32 if x.bitwidth == 32 else types.int64
        width = x.bitwidth

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.IntType(width))

        return rt(x), codegen
    return None


def _make_int_to_float(width):
    ftype = types.float32 if width == 32 else types.float64

    def typer(typingctx, i):
        if isinstance(i, types.Integer):

            def codegen(context, builder, sig, args):
                v = args[0]
                src = i.bitwidth
                if src > width:
                    v = builder.trunc(v, ir.IntType(width))
                elif src < width:
                    v = (
                        builder.sext(v, ir.IntType(width))
                        if i.signed
                        else builder.zext(v, ir.IntType(width))
                    )
                lty = ir.FloatType() if width == 32 else ir.DoubleType()
                return builder.bitcast(v, lty)

            return ftype(i), codegen
        return None

    return typer


_as_f32 = intrinsic(_make_int_to_float(32))
_as_f32.__doc__ = "Reinterpret the low 32 bits of an integer as a float32."
_as_f64 = intrinsic(_make_int_to_float(64))
_as_f64.__doc__ = "Reinterpret the low 64 bits of an integer as a float64."


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with a single rounding (llvm.fma)."""
    if isinstance(a, types.Float) and a == b == c:

        def codegen(context, builder, sig, args):
            lty = args[0].type
            fn = builder.module.declare_intrinsic(
                "llvm.fma", [lty], ir.FunctionType(lty, [lty, lty, lty])
            )
            return builder.call(fn, args)

        return a(a, a, a), codegen
    return None


@intrinsic
def _div(typingctx, a, b):
    """IEEE a / b (no ZeroDivisionError check, whatever the caller's error model)."""
    if isinstance(a, types.Float) and a == b:

        def codegen(context, builder, sig, args):
            return builder.fdiv(args[0], args[1])

        return a(a, a), codegen
    return None


@intrinsic
def _select(typingctx, cond, a, b):
    """``a if cond else b`` as one LLVM ``select`` (both evaluated: no branch, no block)."""
    ty = typingctx.unify_types(types.unliteral(a), types.unliteral(b))
    if ty is None:
        return None

    def codegen(context, builder, sig, args):
        test = context.is_true(builder, sig.args[0], args[0])
        x = context.cast(builder, args[1], sig.args[1], ty)
        y = context.cast(builder, args[2], sig.args[2], ty)
        return builder.select(test, x, y)

    return ty(cond, a, b), codegen


# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

_f32 = np.float32
_h = float.fromhex


def _pi_fixed(nbits):
    """floor(pi * 2**nbits) (up to 1 unit), Machin's formula in integers."""
    guard = 40
    prec = nbits + guard
    one = 1 << prec

    def arctan_inv(k):
        total, term, n, k2, sign = 0, one // k, 1, k * k, 1
        while term:
            total += sign * (term // n)
            term //= k2
            n += 2
            sign = -sign
        return total

    return (4 * (4 * arctan_inv(5) - arctan_inv(239))) >> guard


_PI_BITS = 1400
_PI_FIX = _pi_fixed(_PI_BITS)  # pi * 2**1400
_TOP_BITS = 1300
_TWO_OVER_PI_FIX = (1 << (_TOP_BITS + 1 + _PI_BITS)) // _PI_FIX  # 2/pi * 2**1300


def _split(fixed, fbits, widths):
    """Split fixed/2**fbits into floats holding `widths` leading bits each."""
    out = []
    rem = fixed
    for w in widths:
        shift = max(rem.bit_length() - w, 0)
        chunk = rem >> shift
        out.append(float(np.ldexp(float(chunk), shift - fbits)))
        rem -= chunk << shift
    return out


_PIO2_FIX = _PI_FIX >> 1  # pi/2 * 2**1400
_PIO2_64 = _split(_PIO2_FIX, _PI_BITS, [32, 32, 32, 53])  # float64 Cody-Waite parts
_PIO2_DD = _split(_PIO2_FIX, _PI_BITS, [53, 53])


def _ph_table(be_lo, be_hi, bias_shift, nchunks):
    """Payne-Hanek chunks C_i(E) = (2**E * 2/pi restricted to 53-bit windows).

    For x = M * 2**E (M integer) the bits of 2/pi of weight >= 2**-(E-2) only
    contribute multiples of 4 to x*2/pi and are dropped; window i holds the
    bits j in [E-1+53i, E+51+53i] (2/pi = sum b_j 2**-j) scaled by 2**E, so
    C_0 < 4, C_1 < 2**-51, ...
    """
    rows = []
    for be in range(be_lo, be_hi + 1):
        E = be - bias_shift
        row = []
        for i in range(nchunks):
            hi_j = E + 51 + 53 * i
            sh = _TOP_BITS - hi_j
            bits = (_TWO_OVER_PI_FIX >> sh) & ((1 << 53) - 1) if sh < _TOP_BITS + 2 else 0
            row.append(float(np.ldexp(float(bits), E - hi_j)))
        rows.append(row)
    t = np.array(rows, dtype=np.float64)
    return [np.ascontiguousarray(t[:, i]) for i in range(nchunks)]


# float64 inputs (and float32 via float64): biased exponent 1040..2046
_PH64_BE0 = 1040
_PH64_T0, _PH64_T1, _PH64_T2, _PH64_T3 = _ph_table(_PH64_BE0, 2047, 1075, 4)


def _two_over_pi_word(i):
    """Bits 64i+1 .. 64i+64 of 2/pi (2/pi = sum b_j 2**-j) as a signed int64."""
    w = (_TWO_OVER_PI_FIX >> (_TOP_BITS - 64 * (i + 1))) & ((1 << 64) - 1)
    return w - (1 << 64) if w >= (1 << 63) else w


# float32 Payne-Hanek works on integers: four words of 2/pi cover every float32 exponent
_W0, _W1, _W2, _W3 = (_two_over_pi_word(i) for i in range(4))
_TWO_M62 = 2.0**-62
_TWO_M94 = 2.0**-94

# shifters for round-to-nearest-integer via (x + S) - S
_SH32 = _f32(12582912.0)  # 1.5 * 2**23
_SH32_BITS = 0x4B400000
_SHD = 6755399441055744.0  # 1.5 * 2**52
_SHD_BITS = 0x4338000000000000
_TWO52 = 4503599627370496.0

# float32 constants
_ONE32 = _f32(1.0)
_TWO32 = _f32(2.0)
_HALF32 = _f32(0.5)
_ZERO32 = _f32(0.0)
_INF32 = _f32(np.inf)
_NINF32 = _f32(-np.inf)
_NAN32 = _f32(np.nan)
_L2E32 = _f32(_h("0x1.715476p+0"))
_LN2HI32 = _f32(_h("0x1.62e400p-1"))  # 16 significant bits: k*LN2HI exact
_LN2LO32 = _f32(_h("0x1.7f7d1cp-20"))
_LN2_32 = _f32(np.log(2.0))  # ln2 as a float32 pair
_LN2_LO32 = _f32(np.log(2.0) - float(_LN2_32))
_MINNORM32 = _f32(_h("0x1p-126"))
_TWO23_32 = _f32(8388608.0)
_SQRTH32_BITS = 0x3F3504F3  # bits of sqrt(0.5) (rounded down)
_LIM32 = _f32(1048576.0)  # Cody-Waite range of sin/cos float32 (2**20)

# float64 constants
_L2E64 = _h("0x1.71547652b82fep+0")
_LN2HI64 = _h("0x1.62e42fee00000p-1")  # 32 significant bits (fdlibm ln2_hi)
_LN2LO64 = _h("0x1.a39ef35793c76p-33")
_INV_LN2_H = _h("0x1.71547652b82fep+0")
_INV_LN10_H = _h("0x1.bcb7b1526e50ep-2")
_IL2H32 = _f32(_INV_LN2_H)  # 1/ln2 and 1/ln10 as float32 pairs
_IL2L32 = _f32(_INV_LN2_H - float(_IL2H32))
_IL10H32 = _f32(_INV_LN10_H)
_IL10L32 = _f32(_INV_LN10_H - float(_IL10H32))
_LG2H32 = _f32(_h("0x1.344p-2"))  # log10(2): 11 significant bits (e * _LG2H32 exact)
_LG2L32 = _f32(0.30102999566398120 - _h("0x1.344p-2"))
# fdlibm/msun e_log2.c, e_log10.c splits (33 / 40 significant bits in the high parts)
_IVLN2HI, _IVLN2LO = _h("0x1.7154765200000p+0"), _h("0x1.705fc2eefa200p-33")
_IVLN10HI, _IVLN10LO = _h("0x1.bcb7b15200000p-2"), _h("0x1.b9438ca9aadd5p-36")
_LOG10_2HI, _LOG10_2LO = _h("0x1.34413509f6000p-2"), _h("0x1.9fef311f12b36p-42")
_T3H, _T3L = _h("0x1.5555555555555p-1"), _h("0x1.5555555555555p-55")  # 2/3
_T5H, _T5L = _h("0x1.999999999999ap-2"), _h("-0x1.999999999999ap-56")  # 2/5
_MINNORM64 = _h("0x1p-1022")
_TWO54 = 18014398509481984.0
_SQRTH64_BITS = 0x3FE6A09E667F3BCD
_MANT64 = 0x000FFFFFFFFFFFFF
_TWO_O_PI64 = _h("0x1.45f306dc9c883p-1")
_PIO2_1, _PIO2_2, _PIO2_3, _PIO2_4 = _PIO2_64
_PIO2_H, _PIO2_L = _PIO2_DD
_PIO4_H, _PIO4_L = _PIO2_H / 2, _PIO2_L / 2
_PI_H, _PI_L = _PIO2_H * 2, _PIO2_L * 2
_INV_PI64 = 1.0 / np.pi
_PIO2_H32 = _f32(_PIO2_H)  # pi/2, pi/4 and pi as float32 pairs
_PIO2_L32 = _f32((_PIO2_H - float(_PIO2_H32)) + _PIO2_L)
_PIO4_H32, _PIO4_L32 = _PIO2_H32 / _f32(2), _PIO2_L32 / _f32(2)
_PI_H32, _PI_L32 = _PIO2_H32 * _f32(2), _PIO2_L32 * _f32(2)
_LIM64 = 3.0e6  # Cody-Waite range of sin/cos float64 (n < 2**21)
_INF = np.inf
_NAN = np.nan

# Remez minimax coefficients (weighted max error of the fit in the comment).
# Fitted with a Remez exchange in 50-digit arithmetic (mpmath), rounded to
# the working precision.
_COEFFS = {
    # float32: expm1(r) - r = r^2 * P(r), |r| <= ln2/2, relative to exp(r)  (2^-28.2)
    "EXP32": (
        "0x1.fffffc0000000p-2",
        "0x1.55548c0000000p-3",
        "0x1.5559060000000p-5",
        "0x1.123d400000000p-7",
        "0x1.6a1ea20000000p-10",
    ),
    # same, relative to expm1(r)  (2^-31.9)
    "EXPM1_32": (
        "0x1.0000000000000p-1",
        "0x1.5555540000000p-3",
        "0x1.5554ae0000000p-5",
        "0x1.11118c0000000p-7",
        "0x1.6d75e60000000p-10",
        "0x1.a032fc0000000p-13",
    ),
    # log1p(f) = f + f^2 Q(f), f in [sqrt(1/2)-1, sqrt(2)-1]  (2^-27.8)
    "LOG32": (
        "-0x1.fffff80000000p-2",
        "0x1.5555500000000p-2",
        "-0x1.00043e0000000p-2",
        "0x1.99a46e0000000p-3",
        "-0x1.54230e0000000p-3",
        "0x1.2264b60000000p-3",
        "-0x1.0f50d00000000p-3",
        "0x1.08abb60000000p-3",
        "-0x1.38a97c0000000p-4",
    ),
    # tanh(x) = x + x^3 T(x^2), |x| <= 0.63  (2^-32.4)
    "TANH32": (
        "-0x1.5555540000000p-2",
        "0x1.11105a0000000p-3",
        "-0x1.b9ebf40000000p-5",
        "0x1.636de40000000p-6",
        "-0x1.0b5f4e0000000p-7",
        "0x1.16b0520000000p-9",
    ),
    # sin(r) = r + r^3 S(r^2), |r| <= pi/4  (2^-37.5)
    "SIN32": (
        "-0x1.5555560000000p-3",
        "0x1.1111080000000p-7",
        "-0x1.a00f720000000p-13",
        "0x1.6ccea80000000p-19",
    ),
    # cos(r) = 1 - r^2/2 + r^4 C(r^2)  (2^-42.9)
    "COS32": (
        "0x1.5555560000000p-5",
        "-0x1.6c16b80000000p-10",
        "0x1.a010d20000000p-16",
        "-0x1.241c200000000p-22",
    ),
    # erf(x) = x + x E(x^2), |x| <= 0.921875  (2^-31.2)
    "ERF32S": (
        "0x1.06eba80000000p-3",
        "-0x1.8127440000000p-2",
        "0x1.ce2e1c0000000p-4",
        "-0x1.b810400000000p-6",
        "0x1.54d88e0000000p-8",
        "-0x1.aad4be0000000p-11",
        "0x1.5ecadc0000000p-14",
    ),
    # log(erfc(a)) + a^2 = Q(a - 2.5), a in [0.921875, 4], absolute  (2^-26.3)
    "ERF32L": (
        "-0x1.8e8b720000000p+0",
        "-0x1.6925200000000p-2",
        "0x1.cb9fa00000000p-5",
        "-0x1.63cfaa0000000p-7",
        "0x1.1bc8620000000p-9",
        "-0x1.b892ca0000000p-12",
        "0x1.44d4d20000000p-14",
        "-0x1.be6f2c0000000p-17",
        "0x1.ae29fe0000000p-20",
    ),
    # float64: 2**r = 1 + r Q(r), |r| <= 1/2, error of r Q(r) with Q's coefficients rounded
    # (Chebyshev fit; ln2 rounded is most of it)  (2^-55.4)
    "EXP2Q64": (
        "0x1.62e42fefa39efp-1",
        "0x1.ebfbdff82c598p-3",
        "0x1.c6b08d704a0c2p-5",
        "0x1.3b2ab6fba1ddap-7",
        "0x1.5d87fe78a5276p-10",
        "0x1.430913096fd9fp-13",
        "0x1.ffcbfc670dcd4p-17",
        "0x1.62bfd47773353p-20",
        "0x1.b524fae627834p-24",
        "0x1.e6063f7217bc6p-28",
        "0x1.e9d3fe3952179p-32",
    ),
    # float64: exp(r) = 1 + r Q(r), |r| <= 0.3467, error of r Q(r) (Chebyshev fit)  (2^-60.7)
    "EXPQ64": (
        "0x1.0000000000000p+0",
        "0x1.0000000000000p-1",
        "0x1.555555555555ap-3",
        "0x1.5555555555557p-5",
        "0x1.111111110f20ep-7",
        "0x1.6c16c16c15a5fp-10",
        "0x1.a01a01b14d19ep-13",
        "0x1.a01a01a9ed901p-16",
        "0x1.71ddf55adb046p-19",
        "0x1.27e4d40eb84dfp-22",
        "0x1.af634ca3cb41fp-26",
        "0x1.1f7f3b37e9a58p-29",
    ),
    # float64: expm1(r) = r + r^2/2 + r^3 P(r), |r| <= ln2/2, relative  (2^-61.6)
    "EXPM1_64": (
        "0x1.5555555555559p-3",
        "0x1.5555555555548p-5",
        "0x1.111111110f757p-7",
        "0x1.6c16c16c1cf25p-10",
        "0x1.a01a01afb9c68p-13",
        "0x1.a01a018284520p-16",
        "0x1.71ddf893cd787p-19",
        "0x1.27e52bba0594bp-22",
        "0x1.af5e8f2648007p-26",
        "0x1.1ef52e2b788a9p-29",
    ),
    # log(1+f) = 2s + s*z*L(z), s = f/(2+f), z = s^2 <= 0.0295  (2^-59.5)
    "LOG64": (
        "0x1.5555555555593p-1",
        "0x1.999999997fac6p-2",
        "0x1.249249421e07fp-2",
        "0x1.c71c51e26a338p-3",
        "0x1.74664761a2c26p-3",
        "0x1.39a0d42b1f9a7p-3",
        "0x1.2f0ee9cfddb65p-3",
    ),
    # tanh(x) = x + x^3 T(x^2), |x| <= 0.5  (2^-63.7)
    "TANH64": (
        "-0x1.5555555555554p-2",
        "0x1.1111111110f6dp-3",
        "-0x1.ba1ba1b9fa8ffp-5",
        "0x1.664f48785a20dp-6",
        "-0x1.226e3376b746cp-7",
        "0x1.d6d360380eadcp-9",
        "-0x1.7d9ad492cce3ap-10",
        "0x1.34e89d9edd48dp-11",
        "-0x1.edeb5aeccd081p-13",
        "0x1.6bd7379c7c1c9p-14",
        "-0x1.6eec9edbf89f4p-16",
    ),
    # sin(r) = r + r^3 S(r^2), |r| <= pi/4  (2^-57.9)
    "SIN64": (
        "-0x1.5555555555548p-3",
        "0x1.111111110f7c8p-7",
        "-0x1.a01a019bfcdcfp-13",
        "0x1.71de3566dd45cp-19",
        "-0x1.ae5e59caabdadp-26",
        "0x1.5d8f964fb4bf9p-33",
    ),
    # cos(r) = 1 - r^2/2 + r^4 C(r^2)  (2^-64.0)
    "COS64": (
        "0x1.555555555554bp-5",
        "-0x1.6c16c16c14f88p-10",
        "0x1.a01a019c835cep-16",
        "-0x1.27e4f7ea1101dp-22",
        "0x1.1ee9d737b372bp-29",
        "-0x1.8fa457b25e7ebp-37",
    ),
    # erf(x) = x + x E(x^2), |x| <= 1  (2^-62.7)
    "ERF64S": (
        "0x1.06eba8214db69p-3",
        "-0x1.812746b0379e6p-2",
        "0x1.ce2f21a042b1cp-4",
        "-0x1.b82ce31284855p-6",
        "0x1.565bcd0dacf0dp-8",
        "-0x1.c02db3d852785p-11",
        "0x1.f9a3218edf0b9p-14",
        "-0x1.f4d1ddcf54fa2p-17",
        "0x1.b9dedef089fcbp-20",
        "-0x1.5f1c9413d7cf4p-23",
        "0x1.f79d0fdb80f60p-27",
        "-0x1.3854949740f9ap-30",
        "0x1.053c607677b0ap-34",
    ),
    # erfc(a) exp(a^2) (1+2a) = P((a-2)/(a+2)), a in [1, 6], weighted by erfc/erf  (2^-59.5)
    "ERF64L": (
        "0x1.46e80e2277954p+0",
        "-0x1.7bf5ec170013dp-4",
        "-0x1.5407bebf319d0p-3",
        "0x1.4ffa1e14a3c43p-3",
        "-0x1.bc2b956c436dep-5",
        "-0x1.074233511c97ep-7",
        "0x1.1dd2fcf842413p-7",
        "0x1.4d47854649e3bp-10",
        "-0x1.7df023531a480p-10",
        "-0x1.dd8a98520fcc9p-12",
        "0x1.aec064f97b36cp-13",
        "0x1.4ed07e3107e2cp-13",
        "0x1.dc643967789cdp-16",
    ),
}
# arctan(u) = u + u^3 P(u^2), arcsin(u) = u + u^3 Q(u^2), both for u^2 <= 1/4: interpolated
# at the Chebyshev nodes of u^2 in 60-digit arithmetic (mpmath); weighted error < 2**-57.
_COEFFS["ATAN64"] = (
    "-0x1.5555555555555p-2", "0x1.99999999998e1p-3", "-0x1.2492492488296p-3",
    "0x1.c71c71c01b24cp-4", "-0x1.745d16026efd7p-4", "0x1.3b138e6372dcap-4",
    "-0x1.110ea50256abfp-4", "0x1.e1a7b2562efc5p-5", "-0x1.ad44da04adea3p-5",
    "0x1.7b20b751c966ap-5", "-0x1.37d750492dd9bp-5", "0x1.99b4e0c058248p-6",
    "-0x1.2dfbaab9786efp-7",
)  # fmt: skip
_COEFFS["ASIN64"] = (
    "0x1.5555555555556p-3", "0x1.3333333332ecap-4", "0x1.6db6db6e31f13p-5",
    "0x1.f1c71c1db0623p-6", "0x1.6e8bb1c8209a2p-6", "0x1.1c4d35cf95421p-6",
    "0x1.c9cf07674736ap-7", "0x1.782651caa6547p-7", "0x1.52420b04b37bep-7",
    "0x1.65a9c4dfcf8b2p-8", "0x1.1d189408314eep-6", "-0x1.e6aaa8a0a04ccp-7",
    "0x1.d72b2bc8155f8p-6",
)  # fmt: skip
# float32 arctan(u) = u + u^3 P(u^2), arcsin(u) = u + u^3 Q(u^2), u^2 <= 1/4: interpolated at
# the Chebyshev nodes of u^2 (mpmath), rounded to float32; relative error 2**-28.4, 2**-29.9.
_COEFFS["ATAN32"] = (
    "-0x1.5555560000000p-2", "0x1.99998e0000000p-3", "-0x1.248f720000000p-3",
    "0x1.c690de0000000p-4", "-0x1.6ddf9e0000000p-4", "0x1.1213680000000p-4",
    "-0x1.0c35be0000000p-5",
)  # fmt: skip
_COEFFS["ASIN32"] = (
    "0x1.5555560000000p-3", "0x1.33331e0000000p-4", "0x1.6dc0f00000000p-5",
    "0x1.efedf80000000p-6", "0x1.82db240000000p-6", "0x1.5a80a00000000p-7",
    "0x1.fb7ca40000000p-6",
)  # fmt: skip
# float32 sinh(x) = x + x^3 S(x^2), cosh(x) = 1 + x^2/2 + x^4 C(x^2), x^2 <= 1 (as above;
# relative error 2**-27.7, 2**-29.6)
_COEFFS["SINH32"] = (
    "0x1.5555560000000p-3", "0x1.11111e0000000p-7", "0x1.a009000000000p-13",
    "0x1.78a70e0000000p-19",
)  # fmt: skip
_COEFFS["COSH32"] = (
    "0x1.5555560000000p-5", "0x1.6c16ca0000000p-10", "0x1.a00eb00000000p-16",
    "0x1.2c69680000000p-22",
)  # fmt: skip
# float32 sin and cos in float64: sin(r) = r + r^3 S(r^2), |r| <= pi/2, fitted by least squares
# weighted toward equal relative error at the Chebyshev nodes of r^2 (mpmath); 2**-35.2 relative
_COEFFS["SIN_HALF_PI"] = (
    "-0x1.55555546fdc2ap-3", "0x1.11110c34a98cap-7", "-0x1.a017d3f5712c5p-13",
    "0x1.716fe1ffee27fp-19", "-0x1.9a5c5838388a2p-26",
)  # fmt: skip
# float32 pow in float64: log2(1+f) = s P(s^2), s = f/(2+f), s^2 <= 0.0295, and 2**r, |r| <= 1/2,
# fitted by least squares weighted to relative error at Chebyshev nodes (mpmath); relative
# error 2**-37.8 and 2**-34.5 with the coefficients rounded
_COEFFS["LOG2_POW32"] = (
    "0x1.71547652bed43p+1", "0x1.ec709d13871b4p-1", "0x1.27777f6eaebe9p-1",
    "0x1.a58dbc81fec02p-2", "0x1.5ce4e65886836p-2",
)  # fmt: skip
_COEFFS["EXP2_POW32"] = (
    "0x1.ffffffffac2e0p-1", "0x1.62e42ff12da02p-1", "0x1.ebfbe0a44b430p-3",
    "0x1.c6b08a7f9b725p-5", "0x1.3b29dc84c4eddp-7", "0x1.5d8aa05994ff6p-10",
    "0x1.4469f8aa38cacp-13", "0x1.fde0d2dab5cb9p-17",
)  # fmt: skip
# float32 tan in float64: sin r = r + r^3 S(r^2), cos r = 1 + r^2 C(r^2), |r| <= pi/4, fitted as
# above (mpmath); relative error 2**-35.6 and 2**-31.8
_COEFFS["SIN_QUARTER_PI"] = (
    "-0x1.555555545a592p-3", "0x1.11110de869df2p-7", "-0x1.a013a0373727fp-13",
    "0x1.6dbc07448112ap-19",
)  # fmt: skip
_COEFFS["COS_QUARTER_PI"] = (
    "-0x1.fffffffa8f771p-2", "0x1.55554c9bf4648p-5", "-0x1.6c0df78bc8d02p-10",
    "0x1.9a6a9375a9b76p-16",
)  # fmt: skip
# float32 arctan in float64: atan(u) = u + u^3 P(u^2), |u| <= 1/2, fitted as above weighted to
# atan's relative error (mpmath); 2**-36.1
_COEFFS["ATAN_32VIA64"] = (
    "-0x1.5555550a880efp-2", "0x1.99995e0be4d9bp-3", "-0x1.248a28cd654f9p-3",
    "0x1.c60b8ab603aa1p-4", "-0x1.6a988f3787f6cp-4", "0x1.080589fbe2115p-4",
    "-0x1.e87fedaae319ap-6",
)  # fmt: skip
# float32 cbrt in float64: m**(-1/3), m in [1, 2], fitted as above (mpmath); 2**-11.7 relative
_COEFFS["RCBRT32"] = (
    "0x1.89dd0899b2205p+0", "-0x1.9b140c0f151aep-1", "0x1.4073a2c60c200p-2",
    "-0x1.905f81a4e9438p-5",
)  # fmt: skip
# log(m) tail for the double-double log: s^7 * sum_k 2 z^k / (2k+7) (Taylor, z <= 0.0295)
_COEFFS["LOGDD_TAIL"] = tuple(float(2.0 / (2 * k + 7)).hex() for k in range(10))


def _poly(name, dtype, start=0, estrin=False):
    """Build an njit evaluator p(x) = c0 + c1 x + ... with baked constants: Horner's scheme,
    or with ``estrin`` Estrin's (pairs c_2i + c_2i+1 x, then pairs of those by x^2, x^4, ...):
    a chain of about log2(n) fmas where Horner's is n long, for a few more operations. Latency
    against throughput: Estrin's made float32 pow 2.20 -> 1.81 ns an element, float64 exp and
    tanh about 10% slower.

    ``start`` skips the leading coefficients (evaluates sum c_{start+i} x^i).
    """
    fn_name = f"_poly_{name.lower()}_{start}" + ("_estrin" if estrin else "")
    cs = [f"{fn_name}_c{i}" for i in range(len(_COEFFS[name]) - start)]
    globals().update({c: dtype(_h(v)) for c, v in zip(cs, _COEFFS[name][start:])})
    lines = [f"def {fn_name}(x):"]
    if not estrin:
        lines.append(f"    r = {cs[-1]}")
        lines += [f"    r = _fma(r, x, {c})" for c in reversed(cs[:-1])]
        cs = ["r"]
    terms, power, level = cs, "x", 0
    while len(terms) > 1:
        pairs = []
        for i in range(0, len(terms) - 1, 2):
            pairs.append(f"p{level}_{i // 2}")
            lines.append(f"    {pairs[-1]} = _fma({terms[i + 1]}, {power}, {terms[i]})")
        if len(terms) % 2:
            pairs.append(terms[-1])
        if len(pairs) > 1:
            lines.append(f"    x{level + 1} = {power} * {power}")
        terms, power, level = pairs, f"x{level + 1}", level + 1
    lines.append(f"    return {terms[0]}")
    source = "\n".join(lines)
    exec(source, globals())  # noqa: S102 - generated from the constant table above
    return _helper(globals()[fn_name], source)


_p_exp32 = _poly("EXP32", _f32)
_p_expm1_32 = _poly("EXPM1_32", _f32)
_p_log32 = _poly("LOG32", _f32)
_p_tanh32 = _poly("TANH32", _f32)
_p_sin32 = _poly("SIN32", _f32, start=1)
_S0_32 = _f32(_h(_COEFFS["SIN32"][0]))
_p_cos32 = _poly("COS32", _f32)
_p_erf32s = _poly("ERF32S", _f32)
_p_erf32l = _poly("ERF32L", _f32)
_p_expm1_64 = _poly("EXPM1_64", float)
_p_exp2q64 = _poly("EXP2Q64", float)
_p_expq64 = _poly("EXPQ64", float)
_p_log64 = _poly("LOG64", float)
_p_log2_pow32 = _poly("LOG2_POW32", float, estrin=True)
_p_exp2_pow32 = _poly("EXP2_POW32", float, estrin=True)
_p_logdd_tail = _poly("LOGDD_TAIL", float)
_p_tanh64 = _poly("TANH64", float)
_p_sin64 = _poly("SIN64", float, start=1)
_p_sin_half_pi = _poly("SIN_HALF_PI", float)
_p_sin_quarter_pi = _poly("SIN_QUARTER_PI", float)
_p_cos_quarter_pi = _poly("COS_QUARTER_PI", float)
_p_rcbrt32 = _poly("RCBRT32", float)
_p_atan_32via64 = _poly("ATAN_32VIA64", float)
_S0_64 = _h(_COEFFS["SIN64"][0])
_p_cos64 = _poly("COS64", float)
_p_erf64s = _poly("ERF64S", float)
_p_erf64l = _poly("ERF64L", float)
_p_atan64 = _poly("ATAN64", float)
_p_asin64 = _poly("ASIN64", float)
_p_atan32 = _poly("ATAN32", _f32)
_p_asin32 = _poly("ASIN32", _f32)
_p_sinh32 = _poly("SINH32", _f32)
_p_cosh32 = _poly("COSH32", _f32)

# ---------------------------------------------------------------------------
# generic helpers (compiled per dtype)
# ---------------------------------------------------------------------------


@_helper
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@_helper
def _fast_two_sum(a, b):  # requires |a| >= |b| (or a == 0)
    s = a + b
    return s, b - (s - a)


@_helper
def _copysign32(a, b):
    return _as_f32((_as_int(a) & 0x7FFFFFFF) | (_as_int(b) & -2147483648))


@_helper
def _copysign64(a, b):
    return _as_f64((_as_int(a) & 0x7FFFFFFFFFFFFFFF) | (_as_int(b) & (-9223372036854775807 - 1)))


@_helper
def _ldexp32(p, k):
    """p * 2**k for k in [-252, 254] with a single final rounding."""
    k1 = k >> 1
    return (p * _as_f32((k1 + 127) << 23)) * _as_f32((k - k1 + 127) << 23)


@_helper
def _ldexp64(p, k):
    """p * 2**k for k in [-2044, 2046] with a single final rounding."""
    k1 = k >> 1
    return (p * _as_f64((k1 + 1023) << 52)) * _as_f64((k - k1 + 1023) << 52)


@_helper
def _int_to_f32(i):
    """Exact float32 of a small integer (|i| < 2**22) without an int->float op."""
    return _as_f32(i + _SH32_BITS) - _SH32


@_helper
def _int_to_f64(i):
    """Exact float64 of an integer |i| < 2**51."""
    return _as_f64(i + _SHD_BITS) - _SHD


# ---------------------------------------------------------------------------
# float32 kernels
# ---------------------------------------------------------------------------


@_helper
def _exp_parts32(x):
    """(m, k) with exp(x) = m * 2**k, m in [0.7, 1.42], for x in [-104, 89] (or nan)."""
    kf = _fma(x, _L2E32, _SH32)
    ki = _as_int(kf) - _SH32_BITS
    kf = kf - _SH32
    r = _fma(kf, -_LN2HI32, x)  # exact
    r = _fma(kf, -_LN2LO32, r)
    t = _fma(_p_exp32(r), r * r, r)
    return _ONE32 + t, ki


@_helper
def _exp_core32(x):
    """exp(x) for x in [-104, 89] (or nan)."""
    m, k = _exp_parts32(x)
    return _ldexp32(m, k)


@_helper
def _log_core32(x):
    """log(x) for x >= 2**-126 finite (garbage otherwise)."""
    ix = _as_int(x) - _SQRTH32_BITS
    e = ix >> 23
    m = _as_f32((ix & 0x7FFFFF) + _SQRTH32_BITS)
    f = m - _ONE32
    return e, f, f * f * _p_log32(f)  # log(x) = e*ln2 + f + (third value)


@_helper
def _sin_k32(x, y):
    """sin(x + y), |x| <= pi/4 (+tiny), |y| <= ulp(x)."""
    z = x * x
    v = z * x
    r = _p_sin32(z)
    return x - ((z * (_HALF32 * y - v * r) - y) - v * _S0_32)


@_helper
def _cos_k32(x, y):
    """cos(x + y), |x| <= pi/4 (+tiny)."""
    z = x * x
    r = z * z * _p_cos32(z)
    hz = _HALF32 * z
    w = _ONE32 - hz
    return w + (((_ONE32 - w) - hz) + (r - x * y))


@_helper
def _lsr(v, k):
    """Logical right shift of an int64 by 0 <= k <= 63."""
    return np.int64(np.uint64(v) >> np.uint64(k))


@_helper
def _ph32(ax):
    """Payne-Hanek reduction of a float32 |x| >= 2**20 (or inf/nan: garbage out).

    Integer arithmetic only (no table gathers): x = M 2**E, x*2/pi mod 4 needs
    the bits of 2/pi from position E-1 on; a 128-bit window of them (selected
    from four 64-bit words and shifted into place) times the 24-bit M gives
    x*2/pi mod 4 as a 64.32-bit fixed-point number.  Returns (q, r), r in float64.
    """
    b = np.int64(_as_int(ax))
    m = (b & 0x7FFFFF) | 0x800000
    t = ((b >> 23) & 0xFF) - 88  # (E - 1) + 63 with E = be - 150; in [59, 167]
    w = t >> 6
    sh = t & 63
    a0 = 0 if w == 0 else (_W0 if w == 1 else _W1)
    a1 = _W0 if w == 0 else (_W1 if w == 1 else _W2)
    a2 = _W1 if w == 0 else (_W2 if w == 1 else _W3)
    hi = (a0 << sh) | _lsr(_lsr(a1, 1), 63 - sh)  # bits E-1 .. E+62
    lo = (a1 << sh) | _lsr(_lsr(a2, 1), 63 - sh)  # bits E+63 .. E+126
    z = m * hi  # x*2/pi * 2**62 mod 2**64 (wrapping multiply)
    mid = m * _lsr(lo, 32) + ((m * (lo & 0xFFFFFFFF)) >> 32)
    z = z + (mid >> 32)
    q = _lsr(z + (1 << 61), 62)
    d = z - (q << 62)  # x*2/pi - q in units of 2**-62, |d| <= 2**61
    f = np.float64(d) * _TWO_M62 + np.float64(mid & 0xFFFFFFFF) * _TWO_M94
    return q, f * _PIO2_H


@_helper
def _far32(x):
    """x = q*pi/2 + rh + rl (float32 pair) for a finite float32 |x| > _LIM32, by Payne-Hanek
    in float64 (any value below)."""
    ax = abs(x)
    qb, rb = _ph32(ax if ax > _LIM32 else _LIM32)
    rbh = _f32(rb)
    rbl = _f32(rb - np.float64(rbh))
    if x < _ZERO32:
        qb = -qb
        rbh = -rbh
        rbl = -rbl
    return qb, rbh, rbl


@_helper
def _sin_by_pi32(x, half):
    """(sin r, n) for a float32 x, |x| <= _LIM32 (0 taken beyond): n = rint(x/pi - half), an
    int64, r = x - (n + half)*pi in float64 (half 0 or 1/2), |r| <= pi/2. x less (n + half)
    times pi's first 53 bits is exact (a multiple of 2**-52 below 2), the rest of pi leaves an
    error far below r's ulp; sin r to 2**-35 relative: rounded to float32, within 1 ulp."""
    xd = np.float64(x if abs(x) <= _LIM32 else _ZERO32)
    j = _fma(xd, _INV_PI64, -half) + _SHD
    n = _as_int(j) - _SHD_BITS
    nf = (j - _SHD) + half
    r = _fma(nf, -_PI_H, xd)
    r = _fma(nf, -_PI_L, r)
    z = r * r
    return _fma(r * z, _p_sin_half_pi(z), r), n


@_helper
def _by_half_pi32(x):
    """(n's parity, r) with x = n*pi/2 + r, |r| <= pi/4, r in float64, for a float32 x with
    |x| <= _LIM32 (0 taken beyond): n = rint(2x/pi), r as in ``_sin_by_pi32``."""
    xd = np.float64(x if abs(x) <= _LIM32 else _ZERO32)
    j = _fma(xd, _TWO_O_PI64, _SHD)
    nf = j - _SHD
    r = _fma(nf, -_PIO2_H, xd)
    return (_as_int(j) - _SHD_BITS) & 1, _fma(nf, -_PIO2_L, r)


@_helper
def _tan_reduced32(x, odd, r):
    """tan_f32(x) from x = n*pi/2 + r (float64 r, |r| <= pi/4; odd: n's parity): sin r / cos r,
    or -cos r / sin r for odd n, each to 2**-31.8 relative, one division: within 1 ulp once
    rounded to float32."""
    z = r * r
    s = _fma(r * z, _p_sin_quarter_pi(z), r)
    c = _fma(z, _p_cos_quarter_pi(z), 1.0)
    res = _f32(_div(-c if odd else s, s if odd else c))
    res = x if x == _ZERO32 else res
    return res if abs(x) < _INF32 else _NAN32


@_helper
def _sin_near32(x):
    """sin_f32 for |x| <= _LIM32 and +-inf/nan: sin(x) = (-1)**n sin(x - n*pi)."""
    s, n = _sin_by_pi32(x, 0.0)
    res = _f32(-s if n & 1 else s)
    res = x if x == _ZERO32 else res
    return res if abs(x) < _INF32 else _NAN32


@_helper
def _cos_near32(x):
    """cos_f32 for |x| <= _LIM32 and +-inf/nan: cos(x) = (-1)**(n+1) sin(x - (n + 1/2)*pi)."""
    s, n = _sin_by_pi32(x, 0.5)
    res = _f32(s if n & 1 else -s)
    return res if abs(x) < _INF32 else _NAN32


# ---------------------------------------------------------------------------
# float64 kernels
# ---------------------------------------------------------------------------


@_helper
def _exp_reduce64(x, xt):
    """exp(x + xt) = 2**k * exp(r + dr); x in [-1100, 1100] or nan, |xt| tiny."""
    kf = _fma(x, _L2E64, _SHD)
    k = _as_int(kf) - _SHD_BITS
    kf = kf - _SHD
    hi = _fma(kf, -_LN2HI64, x)  # exact
    lo = _fma(kf, _LN2LO64, -xt)
    r, dr = _two_sum(hi, -lo)
    return r, dr, k


@_helper
def _expm1_small64(r, dr):
    """expm1(r + dr) - r for |r| <= ln2/2 (+tiny), |dr| <= ulp(r)."""
    z = r * r
    t = _fma(z * r, _p_expm1_64(r), _fma(dr, r, dr))
    return _fma(z, 0.5, t)


@_helper
def _exp_mant64(r, dr):
    """exp(r + dr) in [0.7, 1.42] with ~0.5 ulp error."""
    small = _expm1_small64(r, dr)
    s = 1.0 + r
    c = (1.0 - s) + r
    return s + (c + small)


@_helper
def _log_dd64(x):
    """log(x) as a double-double (h, l), |error| <~ 2**-68 |log x|; x > 0 finite."""
    sub = x < _MINNORM64
    xs = x * _TWO54 if sub else x
    ix = _as_int(xs) - _SQRTH64_BITS
    e = (ix >> 52) - (54 if sub else 0)
    m = _as_f64((ix & _MANT64) + _SQRTH64_BITS)
    f = m - 1.0  # exact, m in [sqrt(1/2), sqrt(2))
    d = 2.0 + f
    dl = (2.0 - d) + f
    s = _div(f, d)
    rem = _fma(-s, d, f)
    rem = _fma(-s, dl, rem)
    sl = _div(rem, d)  # s + sl = f / (2 + f)
    zh = s * s
    zl = _fma(s, s, -zh) + 2.0 * s * sl
    ch = s * zh  # s^3
    cl = _fma(s, zh, -ch) + (s * zl + sl * zh)
    bh = _T3H * ch  # (2/3) s^3
    bl = _fma(_T3H, ch, -bh) + (_T3H * cl + _T3L * ch)
    fh = ch * zh  # s^5
    fl = _fma(ch, zh, -fh) + (ch * zl + cl * zh)
    gh = _T5H * fh  # (2/5) s^5
    gl = _fma(_T5H, fh, -gh) + (_T5H * fl + _T5L * fh)
    tail = fh * zh * _p_logdd_tail(zh)  # s^7 (2/7 + 2z/9 + ...)
    ef = _int_to_f64(e)
    h, l1 = _two_sum(ef * _LN2HI64, 2.0 * s)
    h, l2 = _two_sum(h, bh)
    h, l3 = _two_sum(h, gh)
    lo = (l1 + l2 + l3) + (ef * _LN2LO64 + (2.0 * sl + (bl + (gl + tail))))
    return _fast_two_sum(h, lo)


@_helper
def _sin_k64(x, y):
    """sin(x + y), |x| <= pi/4 (+tiny), |y| <= ulp(x)  (fdlibm __kernel_sin form)."""
    z = x * x
    v = z * x
    r = _p_sin64(z)
    return x - ((z * (0.5 * y - v * r) - y) - v * _S0_64)


@_helper
def _cos_k64(x, y):
    """cos(x + y), |x| <= pi/4 (+tiny)  (fdlibm __kernel_cos form)."""
    z = x * x
    r = z * z * _p_cos64(z)
    hz = 0.5 * z
    w = 1.0 - hz
    return w + (((1.0 - w) - hz) + (r - x * y))


@_helper
def _ph64(ax):
    """Payne-Hanek for |x| >= 2**17 or inf/nan (float64); returns (q, rh, rl).

    The caller must guarantee ax >= 2**17 (or inf/nan): the table lookup is
    not bounds-checked.
    """
    b = _as_int(ax)
    # ax >= 2**17 (or inf/nan): biased exponent in [1040, 2047], all rows present
    idx = ((b >> 52) & 0x7FF) - _PH64_BE0
    m = _as_f64((b & _MANT64) | 0x4330000000000000)  # 2**52 + mantissa = M
    c0 = _PH64_T0[idx]
    c1 = _PH64_T1[idx]
    c2 = _PH64_T2[idx]
    c3 = _PH64_T3[idx]
    p0h = m * c0
    p0l = _fma(m, c0, -p0h)
    v = p0h * 0.25
    vr = v if v >= _TWO52 else (v + _TWO52) - _TWO52
    a = (p0h - 4.0 * vr) + p0l  # exact, |a| <= 4
    a = a - 4.0 * ((a * 0.25 + _SHD) - _SHD)
    p1h = m * c1
    p1l = _fma(m, c1, -p1h)
    p2h = m * c2
    p2l = _fma(m, c2, -p2h)
    bh, bl = _two_sum(a, p1h)
    j = bh + _SHD
    q = _as_int(j)
    d = bh - (j - _SHD)
    s1, t1 = _two_sum(d, bl)
    s2, t2 = _two_sum(s1, p1l)
    s3, t3 = _two_sum(s2, p2h)
    low = (t1 + t2) + (t3 + (p2l + m * c3))
    fh, fl = _two_sum(s3, low)
    rh = fh * _PIO2_H
    rl = _fma(fh, _PIO2_H, -rh) + (fh * _PIO2_L + fl * _PIO2_H)
    return q, rh, rl


@_helper
def _near64(x):
    """x = q*pi/2 + rh + rl for |x| <= _LIM64; q = rh = rl = 0 beyond."""
    xc = x if abs(x) <= _LIM64 else 0.0
    j = _fma(xc, _TWO_O_PI64, _SHD)
    q = _as_int(j)
    n = j - _SHD
    t = _fma(n, -_PIO2_1, xc)  # exact (n < 2**21, 32-bit parts)
    h, l1 = _two_sum(t, -(n * _PIO2_2))
    h, l2 = _two_sum(h, -(n * _PIO2_3))
    rh, rl = _two_sum(h, (l1 + l2) - n * _PIO2_4)
    return q, rh, rl


@_helper
def _reduce64(x):
    """x = q*pi/2 + rh + rl for any finite float64 x."""
    q, rh, rl = _near64(x)
    ax = abs(x)
    small = ax <= _LIM64
    axl = ax if not small else 131072.0
    qb, bh, bl = _ph64(axl)
    if x < 0.0:
        qb = -qb
        bh = -bh
        bl = -bl
    if not small:
        q = qb
        rh = bh
        rl = bl
    return q, rh, rl


@_helper
def _sin64_impl(x):
    q, rh, rl = _reduce64(x)
    return _sin64_of(x, q, rh, rl)


@_helper
def _sin64_of(x, q, rh, rl):
    """sin(x) from x = q*pi/2 + rh + rl."""
    s = _sin_k64(rh, rl)
    c = _cos_k64(rh, rl)
    r = c if q & 1 else s
    r = -r if q & 2 else r
    r = x if x == 0.0 else r
    return r if abs(x) < _INF else _NAN


@_helper
def _cos64_impl(x):
    q, rh, rl = _reduce64(x)
    return _cos64_of(x, q, rh, rl)


@_helper
def _cos64_of(x, q, rh, rl):
    """cos(x) from x = q*pi/2 + rh + rl."""
    s = _sin_k64(rh, rl)
    c = _cos_k64(rh, rl)
    r = s if q & 1 else c
    r = -r if (q + 1) & 2 else r
    return r if abs(x) < _INF else _NAN


@_helper
def _tan64_impl(x):
    q, rh, rl = _reduce64(x)
    return _tan64_of(x, q, rh, rl)


@_helper
def _tan64_of(x, q, rh, rl):
    """tan(x) from x = q*pi/2 + rh + rl."""
    s = _sin_k64(rh, rl)
    c = _cos_k64(rh, rl)
    r = _div(-c, s) if q & 1 else _div(s, c)
    r = x if x == 0.0 else r
    return r if abs(x) < _INF else _NAN


# Arguments whose exponential rounds to zero are given zero, computed on 0 instead: a vector
# instruction whose result underflows (or is subnormal) takes a microcode assist on Intel
# cores, and exp of arguments below -746 ran 7x slower than of others (2M float64: 7.1 ms
# against 1.0). NaN stays NaN (no comparison holds for it).
@_helper
def _exp64_impl(x):
    xc = 710.0 if x > 710.0 else x
    xc = 0.0 if xc < -746.0 else xc
    r, dr, k = _exp_reduce64(xc, 0.0)
    return 0.0 if x < -746.0 else _ldexp64(_exp_mant64(r, dr), k)


@_helper
def _exp64_fast_impl(x):
    """exp(x) to 1 ulp: the reduction to |r| <= ln2/2 rounded once, then 1 + r Q(r) in one
    fma (about 0.7 ulp at worst, 6% of results a neighbour of the correctly rounded one,
    two-thirds of ``_exp64_impl``'s instructions, which the functions built on exp keep)."""
    xc = 710.0 if x > 710.0 else x
    xc = 0.0 if xc < -746.0 else xc  # (see _exp64_impl)
    kf = _fma(xc, _L2E64, _SHD)
    k = _as_int(kf) - _SHD_BITS
    kf = kf - _SHD
    # _exp_reduce64's r with ln2's tail in one fma (it rounds the tail's product, then the
    # difference, to keep r's error: here unused, and that way exp took 5% longer)
    r = _fma(kf, -_LN2LO64, _fma(kf, -_LN2HI64, xc))
    return 0.0 if x < -746.0 else _ldexp64(_fma(r, _p_expq64(r), 1.0), k)


@_helper
def _exp2_64_impl(x):
    xc = 1025.0 if x > 1025.0 else x
    xc = 0.0 if xc < -1080.0 else xc  # (see _exp64_impl)
    j = xc + _SHD
    k = _as_int(j) - _SHD_BITS
    r = xc - (j - _SHD)  # exact, |r| <= 1/2
    return 0.0 if x < -1080.0 else _ldexp64(_fma(r, _p_exp2q64(r), 1.0), k)


@_helper
def _log_parts64(x):
    """x = 2**e (1 + f), f in [sqrt(1/2)-1, sqrt(2)-1); log(1+f) = f - hfsq + r."""
    sub = x < _MINNORM64
    xs = x * _TWO54 if sub else x
    ix = _as_int(xs) - _SQRTH64_BITS
    e = (ix >> 52) - (54 if sub else 0)
    m = _as_f64((ix & _MANT64) + _SQRTH64_BITS)
    f = m - 1.0
    s = _div(f, 2.0 + f)
    z = s * s
    hfsq = 0.5 * f * f
    return _int_to_f64(e), f, hfsq, s * (hfsq + z * _p_log64(z))


@_helper
def _log_special64(x, res):
    res = -_INF if x == 0.0 else res
    res = _NAN if x < 0.0 else res
    return res if x < _INF else x


@_helper
def _log64_impl(x):
    ef, f, hfsq, r = _log_parts64(x)
    res = ef * _LN2HI64 - ((hfsq - (r + ef * _LN2LO64)) - f)
    return _log_special64(x, res)


@_helper
def _log_hilo64(f, hfsq, r):
    """log(1+f) = hi + lo with hi holding 21 significant bits (fdlibm e_log2.c)."""
    hi = f - hfsq
    hi = _as_f64(_as_int(hi) & -4294967296)  # clear the low 32 bits
    return hi, (f - hi) - hfsq + r


@_helper
def _log2_64_impl(x):
    ef, f, hfsq, r = _log_parts64(x)
    hi, lo = _log_hilo64(f, hfsq, r)
    val_hi = hi * _IVLN2HI
    val_lo = (lo + hi) * _IVLN2LO + lo * _IVLN2HI
    w = ef + val_hi
    val_lo = val_lo + ((ef - w) + val_hi)
    return _log_special64(x, val_lo + w)


@_helper
def _log10_64_impl(x):
    ef, f, hfsq, r = _log_parts64(x)
    hi, lo = _log_hilo64(f, hfsq, r)
    val_hi = hi * _IVLN10HI
    y2 = ef * _LOG10_2HI
    val_lo = ef * _LOG10_2LO + (lo + hi) * _IVLN10LO + lo * _IVLN10HI
    w = y2 + val_hi
    val_lo = val_lo + ((y2 - w) + val_hi)
    return _log_special64(x, val_lo + w)


@_helper
def _expm1_from64(r, dr, k):
    """2**k * (1 + expm1(r + dr)) - 1 for k in [-60, 1030]."""
    e = r + _expm1_small64(r, dr)
    kh = 512 if k > 512 else 0
    t1 = _as_f64((k - kh + 1023) << 52)
    cc = _as_f64((1023 - kh) << 52)
    return _fma(t1, e, t1 - cc) * _as_f64((kh + 1023) << 52)


@_helper
def _sinh64_impl(x):
    a = abs(x)
    ac = 711.0 if a > 711.0 else a
    r, dr, k = _exp_reduce64(ac, 0.0)
    kc = 40 if k > 40 else k
    t = _expm1_from64(r, dr, kc)  # expm1(a) for a < 22
    small = 0.5 * (2.0 * t - _div(t * t, t + 1.0)) if a < 1.0 else 0.5 * (t + _div(t, t + 1.0))
    big = _ldexp64(_exp_mant64(r, dr), k - 1)
    res = small if a < 22.0 else big
    res = _copysign64(res, x)
    return res if a == a else a


@_helper
def _cosh64_impl(x):
    a = abs(x)
    ac = 711.0 if a > 711.0 else a
    r, dr, k = _exp_reduce64(ac, 0.0)
    p = _exp_mant64(r, dr)
    e = r + _expm1_small64(r, dr)
    w = 1.0 + e
    tiny = 1.0 + _div(e * e, w + w)  # valid when k == 0
    kc = 40 if k > 40 else k
    ee = _ldexp64(p, kc)
    mid = 0.5 * ee + _div(0.5, ee)
    big = _ldexp64(p, k - 1)
    res = mid if a < 22.0 else big
    res = tiny if a < 0.34 else res
    return res if a == a else a


@_helper
def _tanh64_impl(x):
    a = abs(x)
    z = a * a
    ps = _fma(a * z, _p_tanh64(z), a)
    ac = 22.0 if a > 22.0 else a
    r, dr, k = _exp_reduce64(ac + ac, 0.0)
    t = _expm1_from64(r, dr, k)
    pl = _div(t, t + 2.0)
    res = ps if a < 0.5 else pl
    return _copysign64(res, x)


@_helper
def _integer_parity64(y):
    """(y is an integer, y is an odd integer) for a float64 y (infinities are even integers)."""
    ay = abs(y)
    yint = (ay >= _TWO52) or (((ay + _TWO52) - _TWO52) == ay)
    hy = 0.5 * ay
    return yint, yint and (ay < 2.0 * _TWO52) and (((hy + _TWO52) - _TWO52) != hy)


@_helper
def _pow_special64(x, y, mag):
    """Apply C99/NumPy special cases of pow to the magnitude |x|**y (float64)."""
    ax = abs(x)
    ay = abs(y)
    yint, odd = _integer_parity64(y)
    neg = x < 0.0
    res = -mag if (neg and odd) else mag
    res = _NAN if (neg and not yint) else res
    if x == 0.0:
        if y > 0.0:
            res = x if odd else 0.0
        else:
            res = _copysign64(_INF, x) if odd else _INF
    if ax == _INF:
        if y > 0.0:
            res = x if odd else _INF
        else:
            res = _copysign64(0.0, x) if odd else 0.0
    if ay == _INF:
        if ax == 1.0:
            res = 1.0
        elif (ax < 1.0) == (y > 0.0):
            res = 0.0
        else:
            res = _INF
    res = _NAN if (x != x or y != y) else res
    res = 1.0 if (y == 0.0 or x == 1.0) else res
    return res


@_helper
def _pow64_impl(x, y):
    ax = abs(x)
    lh, ll = _log_dd64(ax)
    zh = y * lh
    zl = _fma(y, lh, -zh) + y * ll
    ok = abs(zh) <= 746.0
    zl = zl if ok else 0.0
    zc = 710.0 if zh > 710.0 else zh
    zc = 0.0 if zc < -746.0 else zc  # (see _exp64_impl)
    zc = zc if zc == zc else 0.0
    r, dr, k = _exp_reduce64(zc, zl)
    mag = 0.0 if zh < -746.0 else _ldexp64(_exp_mant64(r, dr), k)
    return _pow_special64(x, y, mag)


@_helper
def _pow32_via64(x, y):
    """float32 pow in float64 (x, y float32 values): |x| = 2**e m, m in [sqrt(1/2), sqrt(2)),
    log2 m = s P(s^2) (relative 2**-37.8), t = y (e + log2 m), 2**t = 2**k 2**r with |r| <= 1/2
    (2**-34.5): the magnitude errs by less than 2**-30 relative before its one rounding to
    float32. Every float32 is a normal float64 and so is 2**k for |k| <= 200: no subnormal,
    overflow or scaling step (t is clamped there, far past float32's range)."""
    ix = _as_int(abs(x)) - _SQRTH64_BITS
    f = _as_f64((ix & _MANT64) + _SQRTH64_BITS) - 1.0
    mag = _exp2_32via64(y * (_int_to_f64(ix >> 52) + _log2_1p32via64(f)))
    return _pow_special32via64(x, y, mag)


@_helper
def _log2_1p32via64(f):
    """log2(1 + f) for f in [sqrt(1/2) - 1, sqrt2 - 1]: s P(s^2), s = f / (2 + f) (2**-37.8)."""
    s = _div(f, 2.0 + f)
    return s * _p_log2_pow32(s * s)


@_helper
def _exp2_32via64(t):
    """2**t for results rounded to float32: t clamped to [-200, 200] (far past float32's
    range, and 2**k stays a normal float64; nan taken as 0), 2**t = 2**k 2**r, |r| <= 1/2, by
    a polynomial (2**-34.5)."""
    t = 200.0 if t > 200.0 else t
    t = -200.0 if t < -200.0 else t
    t = t if t == t else 0.0
    kb = t + _SHD
    return _p_exp2_pow32(t - (kb - _SHD)) * _as_f64((_as_int(kb) - _SHD_BITS + 1023) << 52)


@_helper
def _pow_special32via64(x, y, mag):
    """np.power's special cases around ``_pow32_via64``'s magnitude, which already is 1 for
    y = 0 or |x| = 1 (t = 0, or nan clamped to 0: pow(-1, +-inf) = 1 too), 0 or inf for
    |x| < 1 or > 1 with y = +-inf (t clamped), and garbage only for x = 0, +-inf or nan."""
    yint, odd = _integer_parity64(y)
    ax = abs(x)
    edge = (ax == 0.0) or (ax == _INF)
    res = (0.0 if (ax == 0.0) == (y > 0.0) else _INF) if edge else mag
    res = _copysign64(res, x) if odd else res  # (-0.0 ** 3 = -0.0)
    res = _NAN if (x < 0.0 and x > -_INF and not yint) or x != x or y != y else res
    return 1.0 if (y == 0.0 or x == 1.0) else res


# ---------------------------------------------------------------------------
# inverse trigonometric functions (float64; float32 arctan2 rounds its results once)
# ---------------------------------------------------------------------------


@_helper
def _atan_ratio64(n, d):
    """atan(n / d) for 0 <= n <= d (or inf / inf, nan): u = n/d reduced to |u| <= 1/2 by
    atan(t) = pi/4 + atan((n - d) / (n + d)) for n/d in [1/2, 1]; u + u^3 P(u^2)."""
    k = 0.25 if d > 1e300 else 1.0  # n + d must not overflow (exact scaling)
    n, d = n * k, d * k
    mid = n + n >= d
    num = n - d if mid else n  # exact for n/d in [1/2, 1] (Sterbenz)
    den = n + d if mid else d
    u = _div(num, den)
    v = u * u
    p = u * v * _p_atan64(v)
    return (_PIO4_H + (u + (p + _PIO4_L))) if mid else u + p


@_helper
def _atan64_impl(x):
    a = abs(x)
    big = a > 1.0
    n = 1.0 if big else a
    d = a if big else 1.0
    r = _atan_ratio64(n, d)
    r = (_PIO2_H + (_PIO2_L - r)) if big else r
    r = _PIO2_H if a == _INF else r
    return _copysign64(r, x)


@_helper
def _atan2_64_impl(y, x):
    """C99 atan2: the angle of (x, y), signs of zeros and infinities as NumPy's."""
    ax, ay = abs(x), abs(y)
    steep = ay > ax
    return _atan2_of(y, x, _atan_ratio64(ax if steep else ay, ay if steep else ax))


@_helper
def _atan2_32via64(y, x):
    """atan2 of float32 y, x in float64 to 2**-36 relative (``_atan_ratio32via64``)."""
    ax, ay = abs(x), abs(y)
    steep = ay > ax
    return _atan2_of(y, x, _atan_ratio32via64(ax if steep else ay, ay if steep else ax))


@_helper
def _atan2_of(y, x, r):
    """atan2(y, x) from r = atan(n / d), n and d the smaller and the larger of |x| and |y|."""
    ax, ay = abs(x), abs(y)
    steep = ay > ax
    n = ax if steep else ay
    d = ay if steep else ax
    r = _PIO4_H if ax == _INF and ay == _INF else r
    r = 0.0 if d == 0.0 or (n < _INF and d == _INF) else r
    r = (_PIO2_H + (_PIO2_L - r)) if steep else r
    left = x < 0.0 or (x == 0.0 and _as_int(x) < 0)  # x <= -0.0
    r = (_PI_H + (_PI_L - r)) if left else r
    r = _NAN if (x != x or y != y) else r
    return _copysign64(r, y)


@_helper
def _atan_ratio32via64(n, d):
    """atan(n / d) for float32 0 <= n <= d as ``_atan_ratio64`` (n - d and n + d exact: no
    scaling), by a polynomial of 7 coefficients."""
    mid = n + n >= d
    u = _div(n - d if mid else n, n + d if mid else d)
    v = u * u
    p = u * v * _p_atan_32via64(v)
    return (_PIO4_H + (u + (p + _PIO4_L))) if mid else u + p


@_helper
def _asin_core64(u):
    """asin(u) for 0 <= u <= 1/2 minus u: u^3 Q(u^2)."""
    v = u * u
    return u * v * _p_asin64(v)


@_helper
def _asin_far64(a):
    """2 asin(sqrt((1 - a) / 2)) for 1/2 <= a <= 1 as a double-double (s, tail): the square
    root's own error carried in the tail."""
    z = 0.5 - 0.5 * a  # exact for a in [1/2, 1]
    s = np.sqrt(z)
    sl = _div(_fma(-s, s, z), s + s) if s > 0.0 else 0.0
    return s + s, 2.0 * (sl + _asin_core64(s))


@_helper
def _asin64_impl(x):
    a = abs(x)
    near = a <= 0.5
    fh, fl = _asin_far64(0.5 if near else a)
    r = a + _asin_core64(a) if near else _PIO2_H + ((_PIO2_L - fl) - fh)
    r = _NAN if a > 1.0 else r
    return _copysign64(r, x)


@_helper
def _acos64_impl(x):
    a = abs(x)
    near = a <= 0.5
    fh, fl = _asin_far64(0.5 if near else a)
    small = _PIO2_H + (_PIO2_L - (x + _asin_core64(a) * (1.0 if x >= 0.0 else -1.0)))
    right = fh + fl  # acos(a) = 2 asin(sqrt((1 - a) / 2))
    left = _PI_H + ((_PI_L - fl) - fh)
    r = small if near else (right if x > 0.0 else left)
    return _NAN if a > 1.0 or x != x else r


# ---------------------------------------------------------------------------
# powers by a constant: integers and halves of odd integers
# ---------------------------------------------------------------------------


@_helper
def _dd_mul(ah, al, bh, bl):
    """(ah + al) * (bh + bl) as a double-double (relative error ~2**-104)."""
    p = ah * bh
    e = _fma(ah, bh, -p)
    e = _fma(ah, bl, e)
    e = _fma(al, bh, e)
    return _fast_two_sum(p, e)


@_helper
def _dd_pow_bit(rh, rl, bh, bl, take):
    """One step of binary exponentiation: r * b where ``take``, and b * b."""
    th, tl = _dd_mul(rh, rl, bh, bl)
    rh = th if take else rh
    rl = tl if take else rl
    bh, bl = _dd_mul(bh, bl, bh, bl)
    return rh, rl, bh, bl


@_helper
def _dd_powi(m, n):
    """m**n as a double-double for 0 <= n < 32 (m in [1, 4): no overflow). With ``n`` a
    constant after inlining, the selects fold away: n's multiplication chain is left."""
    rh, rl, bh, bl = _dd_pow_bit(1.0, 0.0, m, 0.0, n & 1)
    rh, rl, bh, bl = _dd_pow_bit(rh, rl, bh, bl, n & 2)
    rh, rl, bh, bl = _dd_pow_bit(rh, rl, bh, bl, n & 4)
    rh, rl, bh, bl = _dd_pow_bit(rh, rl, bh, bl, n & 8)
    th, tl = _dd_mul(rh, rl, bh, bl)
    return (th, tl) if n & 16 else (rh, rl)


@_helper
def _pow_const64(x, y):
    """|x|**y for y an integer (|y| < 32) or a multiple of 1/4 (|y| < 16) (``power_const_f64``
    sends it the quarters; integers and halves go to ``_pow_halves64``), then pow's
    special cases: |x| = m * 2**e with m in [1, 16) (e a multiple of 4 where 4y is odd, of 2
    where 2y is), m**y as a double-double (a multiplication chain, a square root and its
    square root, a reciprocal), times 2**(e*y) rounded once."""
    ax = abs(x)
    sub = ax < _MINNORM64
    bits = _as_int(ax * _TWO54 if sub else ax)
    e = ((bits >> 52) & 0x7FF) - (1023 + 54 if sub else 1023)
    m = _as_f64((bits & _MANT64) | 0x3FF0000000000000)
    quad = int(4.0 * y)  # y is a constant of the code generator: never nan or huge
    k = abs(quad)
    half, quarter = (k & 2) == 2, (k & 1) == 1
    shift = e & 3 if quarter else (e & 1 if half else 0)
    m = m * _as_f64((shift + 1023) << 52)  # exact: m in [1, 16)
    e = e - shift
    ph, pl = _dd_powi(m, k >> 2)
    s = np.sqrt(m)
    sl = _div(_fma(-s, s, m), s + s)
    hh, hl = _dd_mul(ph, pl, s, sl)
    ph = hh if half else ph
    pl = hl if half else pl
    t = np.sqrt(s)
    tl = _div(_fma(-t, t, s) + sl, t + t)
    hh, hl = _dd_mul(ph, pl, t, tl)
    ph = hh if quarter else ph
    pl = hl if quarter else pl
    q = _div(1.0, ph)
    r = _fma(-ph, q, 1.0)
    r = _fma(-pl, q, r)
    ph, pl = (q, r * q) if quad < 0 else (ph, pl)
    scale = (e * quad) >> 2
    scale = 2046 if scale > 2046 else scale
    scale = -2044 if scale < -2044 else scale
    return _pow_special64(x, y, _ldexp64(ph + pl, scale))


@_helper
def _pair_mul(ah, al, bh, bl):
    """(ah + al) * (bh + bl) as a pair whose high part is the plain product ``ah * bh``: the
    low part carries its rounding error (exact where ``|ah * bh| >= 2**-960``) and the cross
    terms. Not renormalised, so inf, nan and zero stay in the high part."""
    h = ah * bh
    return h, _fma(ah, bh, -h) + (ah * bl + al * bh)


@_helper
def _pair_powi(x, n):
    """x**n for a constant integer 1 <= n < 32 as a ``_pair_mul`` pair: the squares x, x**2,
    ... x**16 and the product of those n's bits select, from the lowest set bit up. With n
    a constant after inlining, the selects fold: only n's own products are left."""
    low = n & -n
    h2 = x * x
    l2 = _fma(x, x, -h2)
    h4, l4 = _pair_mul(h2, l2, h2, l2)
    h8, l8 = _pair_mul(h4, l4, h4, l4)
    h16, l16 = _pair_mul(h8, l8, h8, l8)
    rh = x if low == 1 else (h2 if low == 2 else (h4 if low == 4 else (h8 if low == 8 else h16)))
    rl = 0.0 if low == 1 else (l2 if low == 2 else (l4 if low == 4 else (l8 if low == 8 else l16)))
    th, tl = _pair_mul(rh, rl, h2, l2)
    rh, rl = (th, tl) if (n & 2) and low < 2 else (rh, rl)
    th, tl = _pair_mul(rh, rl, h4, l4)
    rh, rl = (th, tl) if (n & 4) and low < 4 else (rh, rl)
    th, tl = _pair_mul(rh, rl, h8, l8)
    rh, rl = (th, tl) if (n & 8) and low < 8 else (rh, rl)
    th, tl = _pair_mul(rh, rl, h16, l16)
    return (th, tl) if (n & 16) and low < 16 else (rh, rl)


@_helper
def _plain_powi(x, n):
    """x**n for a constant integer 0 <= n < 32 as a plain product of x's squares, from the
    lowest bit of n up."""
    x2 = x * x
    x4 = x2 * x2
    x8 = x4 * x4
    p = x if n & 1 else 1.0
    p = p * x2 if n & 2 else p
    p = p * x4 if n & 4 else p
    p = p * x8 if n & 8 else p
    return p * (x8 * x8) if n & 16 else p


@_helper
def _pow_halves64(x, m2):
    """x**(m2/2) for a constant integer m2 != 0, |m2| < 64 (odd: |m2| < 32), without taking x
    apart: x**k as a ``_pair_powi`` pair (k = |m2| // 2), times sqrt(x) with its residual for
    odd m2, rounded once; its reciprocal, corrected, for m2 < 0. No division but that one: the
    residual's share is ``res * x**(k-1) * sqrt(x) / 2`` (for k = 0, the reciprocal's).
    Where |x|**(|m2|/2) would leave [2**-960, 2**1000], the band where the pair is exact
    enough, x is first scaled into it by 2**(-+2t) and the result back by one multiplication
    (which rounds once more only where the result is subnormal: 1 ulp). inf, nan and zeros
    follow the plain product (and 1/it); a negative x to a half power is nan, -inf's +inf."""
    n2 = abs(m2)
    half = (n2 & 1) == 1
    k = n2 >> 1
    t = (116 + n2 - 1) // n2  # t * n2 >= 116: the scaled power of a tiny x is in the band
    tiny_e = 1920 // n2 if n2 > 1 else 960  # x >= 2**-960 also keeps sqrt's residual exact
    huge_e = 2000 // n2 if n2 > 1 else 1024
    ax = abs(x)
    tiny = ax < _as_f64((1023 - tiny_e) << 52)
    huge = ax >= _as_f64((1023 + huge_e) << 52)
    xs = x * _as_f64((1023 + 2 * t) << 52) if tiny else x
    xs = x * _as_f64((1023 - 2 * t) << 52) if huge else xs
    xb = abs(xs) if half else xs
    ph, pl = _pair_powi(xb, k) if k > 0 else (1.0, 0.0)
    s = np.sqrt(xb)
    h = ph * s if half else ph
    q = _div(1.0, h)
    c = _plain_powi(xb, k - 1) * s if k > 0 else q  # ph / s
    lo = _fma(ph, s, -h) + (pl * s + 0.5 * _fma(-s, s, xb) * c) if half else pl
    ordinary = h != 0.0 and abs(h) < _INF  # not an overflow, a zero, inf or nan of the chain
    r = h + lo if ordinary else h
    r = (q + (_fma(-h, q, 1.0) - lo * q) * q if ordinary and abs(q) < _INF else q) if m2 < 0 else r
    r = _NAN if half and x < 0.0 and x > -_INF else r
    back = t * n2 if tiny == (m2 < 0) else -t * n2
    return r * _as_f64((1023 + back) << 52) if tiny or huge else r


@_helper
def _pow_const32via64(x, y):
    """The float32 power by a constant exponent, in float64: a plain multiplication chain,
    square roots and division (relative error < 2**-48, then one rounding to float32); every
    overflow and underflow of the chain is one of the float32 result too."""
    ax = abs(x)
    quad = int(4.0 * y)
    k = abs(quad)
    p = _plain_powi(ax, k >> 2)
    root = np.sqrt(ax)
    p = p * root if k & 2 else p
    p = p * np.sqrt(root) if k & 1 else p
    p = _div(1.0, p) if quad < 0 else p
    return _pow_special64(x, y, p)


# ---------------------------------------------------------------------------
# public float32 functions
# ---------------------------------------------------------------------------


@_jit
def exp_f32(x):
    """exp(x) for float32.

    Range reduction x = k ln2 + r (Cody-Waite with fma), degree-6 polynomial,
    2**k applied in two steps so that overflow (x > 88.72) gives inf and
    gradual underflow (x < -87.34) gives correctly rounded subnormals / 0.
    Domain: all float32.  max error vs correctly rounded: 1 ulp.

    >>> float(exp_f32(np.float32(1.0)))  # doctest: +ELLIPSIS
    2.71828...
    """
    x = _f32(x)
    xc = _f32(89.0) if x > _f32(89.0) else x
    xc = _ZERO32 if xc < _f32(-104.0) else xc  # (see _exp64_impl)
    return _ZERO32 if x < _f32(-104.0) else _exp_core32(xc)


@_jit
def expm1_f32(x):
    """exp(x) - 1 for float32, accurate near 0; expm1(-0.0) = -0.0.

    Domain: all float32 (x < -17.33 -> -1, x > 88.72 -> inf).
    max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    xc = _f32(89.0) if x > _f32(89.0) else x
    xc = _f32(-20.0) if xc < _f32(-20.0) else xc
    kf = _fma(xc, _L2E32, _SH32)
    k = _as_int(kf) - _SH32_BITS
    kf = kf - _SH32
    r = _fma(kf, -_LN2HI32, xc)
    r = _fma(kf, -_LN2LO32, r)
    e = _fma(_p_expm1_32(r), r * r, r)
    kh = 64 if k > 64 else 0
    t1 = _as_f32((k - kh + 127) << 23)
    cc = _as_f32((127 - kh) << 23)
    res = _fma(t1, e, t1 - cc) * _as_f32((kh + 127) << 23)
    return x if x == _ZERO32 else res


@_jit
def log_f32(x):
    """Natural logarithm for float32 (subnormal inputs exact-scaled).

    log(+-0) = -inf, log(x<0) = nan, log(inf) = inf.
    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    sub = x < _MINNORM32
    xs = x * _TWO23_32 if sub else x
    e, f, w = _log_core32(xs)
    e = e - (23 if sub else 0)
    ef = _int_to_f32(e)
    res = _fma(ef, _LN2HI32, f + _fma(ef, _LN2LO32, w))
    res = _NINF32 if x == _ZERO32 else res
    res = _NAN32 if x < _ZERO32 else res
    return res if x < _INF32 else x


@_jit
def log1p_f32(x):
    """log(1 + x) for float32, accurate near 0; log1p(-0.0) = -0.0, log1p(-1) = -inf.

    Domain: all float32 (x < -1 -> nan).  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    u = _ONE32 + x
    c = _div(x - (u - _ONE32), u)  # rounding error of 1 + x, relative to u
    e, f, w = _log_core32(u)
    ef = _int_to_f32(e)
    res = _fma(ef, _LN2HI32, f + _fma(ef, _LN2LO32, w + c))
    res = x if x == _ZERO32 else res
    res = _NINF32 if x == -_ONE32 else res
    res = _NAN32 if x < -_ONE32 else res
    return res if x < _INF32 else x


@_jit
def tanh_f32(x):
    """Hyperbolic tangent for float32.

    |x| < 0.625: odd polynomial; otherwise 1 - 2/(exp(2|x|) + 1).
    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    a = abs(x)
    z = a * a
    ps = _fma(a * z, _p_tanh32(z), a)
    ac = _f32(10.0) if a > _f32(10.0) else a
    m, k = _exp_parts32(ac + ac)
    e = m * _as_f32((k + 127) << 23)  # exp(2|x|) <= e**20: one exact scaling (k <= 29)
    pl = _ONE32 - _div(_TWO32, e + _ONE32)
    res = ps if a < _f32(0.625) else pl
    return _copysign32(res, x)


@_jit
def sigmoid_f32(x):
    """Logistic sigmoid 1/(1+exp(-x)) for float32.

    Evaluated as exp(-|x|)-based quotient, so it never overflows and gives
    correctly rounded subnormals for x in [-103.9, -87.3].
    Reference: 1/(1+np.exp(-x)) evaluated in float64 and rounded to float32.
    Domain: all float32.  max error vs correctly rounded: 2 ulp.
    """
    x = _f32(x)
    a = abs(x)
    ac = _ZERO32 if a > _f32(104.0) else a  # (see _exp64_impl)
    e = _ZERO32 if a > _f32(104.0) else _exp_core32(-ac)
    num = _ONE32 if x >= _ZERO32 else e
    return _div(num, _ONE32 + e)


@_jit
def erf_f32(x):
    """Error function for float32.

    |x| < 0.921875: x + x*E(x^2); otherwise 1 - exp(Q(|x|) - x^2) where
    Q ~ log(erfc(a)) + a^2.  Reference: math.erf (float64) rounded to float32.
    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    a = abs(x)
    s = _fma(a, _p_erf32s(a * a), a)
    ac = _f32(4.0) if a > _f32(4.0) else a
    q = _p_erf32l(ac - _f32(2.5))
    el = _exp_core32(q - ac * ac)
    res = s if a < _f32(0.921875) else _ONE32 - el
    return _copysign32(res, x)


@_jit
def sin_f32(x):
    """Sine for float32.

    For |x| <= 2**20 in float64: reduction by pi (exact to far below the result's
    ulp), one odd polynomial, rounded once; float64 Payne-Hanek reduction (table
    of 2/pi bits) beyond, so every finite input is accurate.  sin(-0.0) = -0.0.
    Domain: all float32 (+-inf -> nan).  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    q, rh, rl = _far32(x)
    return _sin_near32(x) if abs(x) <= _LIM32 else _sin32_of(x, q, rh, rl)


@_helper
def _sin32_of(x, q, rh, rl):
    """sin(x) from x = q*pi/2 + rh + rl."""
    s = _sin_k32(rh, rl)
    c = _cos_k32(rh, rl)
    r = c if q & 1 else s
    r = -r if q & 2 else r
    r = x if x == _ZERO32 else r
    return r if abs(x) < _INF32 else _NAN32


@_jit
def cos_f32(x):
    """Cosine for float32 (as sin_f32: cos(x) = -sin(x - pi/2) near, Payne-Hanek beyond).

    Domain: all float32 (+-inf -> nan).  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    q, rh, rl = _far32(x)
    return _cos_near32(x) if abs(x) <= _LIM32 else _cos32_of(x, q, rh, rl)


@_helper
def _cos32_of(x, q, rh, rl):
    """cos(x) from x = q*pi/2 + rh + rl."""
    s = _sin_k32(rh, rl)
    c = _cos_k32(rh, rl)
    r = s if q & 1 else c
    r = -r if (q + 1) & 2 else r
    return r if abs(x) < _INF32 else _NAN32


@_jit
def power_f32(x, y):
    """x**y for float32 (np.power semantics incl. all C99 special cases).

    Computed as 2**(y*log2|x|) in float64 and rounded once; negative x with an
    integer y gives the signed result, with a non-integer y nan.
    Domain: all float32 pairs.  max error vs correctly rounded: 1 ulp.
    """
    return _f32(_pow32_via64(np.float64(_f32(x)), np.float64(_f32(y))))


@_jit
def exp2_f32(x):
    """2**x for float32, in float32: x = k + f (k an integer, |f| <= 1/2, both exact), f*ln2
    as a float32 pair r + dr, exp(r + dr) by exp_f32's polynomial, times 2**k in two steps
    (subnormal and overflowing results as NumPy's).

    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    xc = _f32(129.0) if x > _f32(129.0) else x  # nan stays nan
    xc = _ZERO32 if xc < _f32(-151.0) else xc  # (see _exp64_impl)
    kf = xc + _SH32
    k = _as_int(kf) - _SH32_BITS
    f = xc - (kf - _SH32)
    r = f * _LN2_32
    dr = _fma(f, _LN2_32, -r) + f * _LN2_LO32
    t = _fma(_p_exp32(r), r * r, r)
    return _ZERO32 if x < _f32(-151.0) else _ldexp32(_ONE32 + (t + dr), k)


@_helper
def _log_scaled32(x, ih, il, eh, el):
    """log(x) * (ih + il) for float32 x (special values as NumPy's), with the exponent's
    share e * (eh + el) (eh * e exact): log2 with ih + il = 1/ln2, eh = 1, el = 0."""
    sub = x < _MINNORM32
    e, f, w = _log_core32(x * _TWO23_32 if sub else x)
    ef = _int_to_f32(e - (23 if sub else 0))
    th = f * ih
    tl = _fma(f, ih, -th) + _fma(f, il, w * ih)
    sh, sl = _two_sum(ef * eh, th)
    res = sh + (sl + _fma(ef, el, tl))
    res = _NINF32 if x == _ZERO32 else res
    res = _NAN32 if x < _ZERO32 else res
    return res if x < _INF32 else x


@_jit
def log2_f32(x):
    """log2(x) for float32, in float32: x = 2**e (1 + f), e + log1p(f)/ln2 with 1/ln2 as a
    float32 pair and the sum e + f/ln2 carried as a pair.

    Exact for powers of two.  Domain: all float32.
    max error vs correctly rounded: 1 ulp.
    """
    return _log_scaled32(_f32(x), _IL2H32, _IL2L32, _ONE32, _ZERO32)


@_jit
def log10_f32(x):
    """log10(x) for float32, in float32: e log10(2) + log1p(f)/ln10 with both constants as
    float32 pairs and the sum carried as a pair.

    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    return _log_scaled32(_f32(x), _IL10H32, _IL10L32, _LG2H32, _LG2L32)


@_helper
def _exp_half_pair32(a, sign):
    """(exp(a) + sign * exp(-a)) / 2 for a float32 1 <= a (or inf, nan: garbage): a = k ln2 +
    r + rl, exp(a) / 2**k = 1 + r + tl with 1 + r a pair, the smaller exp(-a) / 2**k =
    2**-2k / (1 + r + tl) added to the low part, 2**(k-1) applied once at the end."""
    ac = _f32(90.0) if a > _f32(90.0) else a  # sinh and cosh overflow from 89.42
    kf = _fma(ac, _L2E32, _SH32)
    k = _as_int(kf) - _SH32_BITS
    kf = kf - _SH32
    r1 = _fma(kf, -_LN2HI32, ac)  # exact
    r = _fma(kf, -_LN2LO32, r1)
    rl = _fma(kf, -_LN2LO32, r1 - r)  # the rounding error of r
    tl = _fma(r * r, _p_exp32(r), rl)  # exp(r + rl) = 1 + r + tl (to 2**-28)
    sh, sl = _fast_two_sum(_ONE32, r)
    kc = 40 if k > 40 else k
    g = _div(_as_f32((127 - kc - kc) << 23), sh + (sl + tl))
    return _ldexp32(sh + (sl + (tl + sign * g)), k - 1)


@_jit
def sinh_f32(x):
    """sinh(x) for float32, in float32: |x| < 1: x + x^3 S(x^2); beyond,
    (exp|x| - exp(-|x|)) / 2 from one reduction (see ``_exp_half_pair32``).

    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    a = abs(x)
    z = a * a
    small = _fma(a * z, _p_sinh32(z), a)
    res = small if a < _ONE32 else _exp_half_pair32(_ONE32 if a < _ONE32 else a, -_ONE32)
    res = _copysign32(res, x)
    return res if a == a else x


@_jit
def cosh_f32(x):
    """cosh(x) for float32, in float32: |x| < 1: 1 + x^2/2 + x^4 C(x^2) with 1 + x^2/2 a
    pair; beyond, (exp|x| + exp(-|x|)) / 2 from one reduction (see ``_exp_half_pair32``).

    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    a = abs(x)
    z = a * a
    hz = _HALF32 * z
    hl = _HALF32 * _fma(a, a, -z)
    sh, sl = _fast_two_sum(_ONE32, hz)
    small = sh + (sl + _fma(z * z, _p_cosh32(z), hl))
    res = small if a < _ONE32 else _exp_half_pair32(_ONE32 if a < _ONE32 else a, _ONE32)
    return res if a == a else a


@_jit
def tan_f32(x):
    """tan(x) for float32 in float64: x = n*pi/2 + r, for |x| <= 2**20 by float64 pi/2 in two
    parts, beyond by sin_f32's Payne-Hanek reduction (a float32 pair); then sin r / cos r by two
    short polynomials and one division, rounded once (``_tan_reduced32``).
    tan(-0.0) = -0.0.  Domain: all float32 (+-inf -> nan).
    max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    odd, r = _by_half_pi32(x)
    q, rh, rl = _far32(x)
    if abs(x) > _LIM32:
        odd = q & 1
        r = np.float64(rh) + np.float64(rl)
    return _tan_reduced32(x, odd, r)


# ---------------------------------------------------------------------------
# public float64 functions
# ---------------------------------------------------------------------------


@_jit
def exp_f64(x):
    """exp(x) for float64.

    Cody-Waite reduction (32+53-bit ln2), 1 + r Q(r) with Q of degree 11 in one fma;
    gradual underflow and overflow as NumPy.  Domain: all float64.
    max error vs correctly rounded: 1 ulp.
    """
    return _exp64_fast_impl(np.float64(x))


@_jit
def expm1_f64(x):
    """exp(x) - 1 for float64, accurate near 0; expm1(-0.0) = -0.0.

    Domain: all float64.  max error vs correctly rounded: 1 ulp.
    """
    x = np.float64(x)
    xc = 710.0 if x > 710.0 else x
    xc = -40.0 if xc < -40.0 else xc
    r, dr, k = _exp_reduce64(xc, 0.0)
    res = _expm1_from64(r, dr, k)
    return x if x == 0.0 else res


@_jit
def log_f64(x):
    """Natural logarithm for float64 (fdlibm-style s = f/(2+f) kernel).

    Subnormals handled by exact scaling.  Domain: all float64.
    max error vs correctly rounded: 1 ulp.
    """
    return _log64_impl(np.float64(x))


@_jit
def log1p_f64(x):
    """log(1 + x) for float64 with the fdlibm rounding-error correction.

    log1p(-0.0) = -0.0, log1p(-1) = -inf.  Domain: all float64.
    max error vs correctly rounded: 1 ulp.
    """
    return _log1p64_impl(np.float64(x))


@_helper
def _log1p64_impl(x):
    u = 1.0 + x
    c = _div(x - (u - 1.0), u)
    ix = _as_int(u) - _SQRTH64_BITS
    e = ix >> 52
    m = _as_f64((ix & _MANT64) + _SQRTH64_BITS)
    f = m - 1.0
    s = _div(f, 2.0 + f)
    z = s * s
    rr = z * _p_log64(z)
    hfsq = 0.5 * f * f
    ef = _int_to_f64(e)
    res = ef * _LN2HI64 - ((hfsq - (s * (hfsq + rr) + (ef * _LN2LO64 + c))) - f)
    res = x if x == 0.0 else res
    res = -_INF if x == -1.0 else res
    res = _NAN if x < -1.0 else res
    return res if x < _INF else x


@_jit
def tanh_f64(x):
    """Hyperbolic tangent for float64.

    |x| < 0.5: odd degree-23 polynomial; otherwise expm1(2|x|)/(expm1(2|x|)+2).
    Domain: all float64.  max error vs correctly rounded: 1 ulp.
    """
    return _tanh64_impl(np.float64(x))


@_jit
def sigmoid_f64(x):
    """Logistic sigmoid 1/(1+exp(-x)) for float64 (no overflow, subnormal tail).

    Reference: 1/(1+np.exp(-x)) in np.longdouble rounded to float64.
    Domain: all float64.  max error vs correctly rounded: 2 ulp.
    """
    x = np.float64(x)
    a = abs(x)
    ac = 0.0 if a > 746.0 else a  # (see _exp64_impl)
    r, dr, k = _exp_reduce64(-ac, 0.0)
    e = 0.0 if a > 746.0 else _ldexp64(_exp_mant64(r, dr), k)
    num = 1.0 if x >= 0.0 else e
    return _div(num, 1.0 + e)


@_jit
def erf_f64(x):
    """Error function for float64.

    |x| < 1: x + x*E(x^2) (degree 25); 1 <= |x| < 6: 1 - exp(-x^2) P(t)/(1+2|x|)
    with t = (|x|-2)/(|x|+2) (Schonfelder-type substitution) and x^2 as a
    double-double.  Reference: math.erf.  Domain: all float64.
    max error vs correctly rounded: 1 ulp (mpmath).
    """
    x = np.float64(x)
    a = abs(x)
    s = _fma(a, _p_erf64s(a * a), a)
    ac = 6.0 if a > 6.0 else a
    t = _div(ac - 2.0, ac + 2.0)
    rr = _div(_p_erf64l(t), _fma(2.0, ac, 1.0))
    zh = ac * ac
    zl = _fma(ac, ac, -zh)
    r, dr, k = _exp_reduce64(-zh, -zl)
    ee = _ldexp64(_exp_mant64(r, dr), k)
    res = s if a < 1.0 else 1.0 - ee * rr
    return _copysign64(res, x)


@_jit
def sin_f64(x):
    """Sine for float64.

    Cody-Waite (3x32 + 53-bit pi/2, double-double result) for |x| <= 3e6,
    Payne-Hanek with a 4x53-bit window of 2/pi beyond: accurate for every
    finite input.  sin(-0.0) = -0.0.  Domain: all float64.
    max error vs correctly rounded: 1 ulp.
    """
    return _sin64_impl(np.float64(x))


@_jit
def cos_f64(x):
    """Cosine for float64 (same reduction as sin_f64).

    Domain: all float64.  max error vs correctly rounded: 1 ulp.
    """
    return _cos64_impl(np.float64(x))


@_jit
def tan_f64(x):
    """tan(x) = sin/cos for float64 (shared reduction, one division).

    Domain: all float64.  max error vs correctly rounded: 2 ulp.
    """
    return _tan64_impl(np.float64(x))


# ---------------------------------------------------------------------------
# sin, cos, tan without their large-argument path
# ---------------------------------------------------------------------------
# A vectorised loop evaluates both sides of every select: each element of sin_f64 pays for
# the Payne-Hanek reduction (two thirds of its time) though ordinary arguments never need it.
# A kernel calls the near versions instead, counts the arguments ``trig_far_*`` says they do
# not cover, and computes everything again with the full functions where that count is not 0.


@_jit
def sin_near_f32(x):
    """sin_f32 for |x| <= 2**20 and +-inf/nan; any other value for other arguments
    (``trig_far_f32``).  max error vs correctly rounded: 1 ulp."""
    return _sin_near32(_f32(x))


@_jit
def cos_near_f32(x):
    """cos_f32 for |x| <= 2**20 and +-inf/nan (see sin_near_f32).
    max error vs correctly rounded: 1 ulp."""
    return _cos_near32(_f32(x))


@_jit
def tan_near_f32(x):
    """tan_f32 for |x| <= 2**20 and +-inf/nan (see sin_near_f32).
    max error vs correctly rounded: 1 ulp."""
    x = _f32(x)
    odd, r = _by_half_pi32(x)
    return _tan_reduced32(x, odd, r)


@_jit
def trig_far_f32(x):
    """1 where sin_near_f32/cos_near_f32/tan_near_f32 do not cover x (finite, |x| > 2**20),
    else 0."""
    ax = abs(_f32(x))
    return np.int64(1) if (ax > _LIM32) & (ax < _INF32) else np.int64(0)


@_jit
def sin_near_f64(x):
    """sin_f64 for |x| <= 3e6 and +-inf/nan; any other value for other arguments
    (``trig_far_f64``).  max error vs correctly rounded: 1 ulp."""
    x = np.float64(x)
    q, rh, rl = _near64(x)
    return _sin64_of(x, q, rh, rl)


@_jit
def cos_near_f64(x):
    """cos_f64 for |x| <= 3e6 and +-inf/nan (see sin_near_f64).
    max error vs correctly rounded: 1 ulp."""
    x = np.float64(x)
    q, rh, rl = _near64(x)
    return _cos64_of(x, q, rh, rl)


@_jit
def tan_near_f64(x):
    """tan_f64 for |x| <= 3e6 and +-inf/nan (see sin_near_f64).
    max error vs correctly rounded: 2 ulp."""
    x = np.float64(x)
    q, rh, rl = _near64(x)
    return _tan64_of(x, q, rh, rl)


@_jit
def trig_far_f64(x):
    """1 where sin_near_f64/cos_near_f64/tan_near_f64 do not cover x (finite, |x| > 3e6),
    else 0."""
    ax = abs(np.float64(x))
    return np.int64(1) if (ax > _LIM64) & (ax < _INF) else np.int64(0)


@_jit
def power_f64(x, y):
    """x**y for float64 with np.power special cases.

    log|x| as a double-double (~2**-68 relative), y*log|x| as a double-double,
    exp with the low part folded into the reduction.  Domain: all float64 pairs.
    max error vs correctly rounded: 1 ulp.
    """
    return _pow64_impl(np.float64(x), np.float64(y))


@_jit
def exp2_f64(x):
    """2**x for float64 (exact for integer x): x = k + r, |r| <= 1/2, 1 + r Q(r) with Q of
    degree 10 in one fma, times 2**k.  Domain: all float64.

    max error vs correctly rounded: 1 ulp.
    """
    return _exp2_64_impl(np.float64(x))


@_jit
def log2_f64(x):
    """log2(x) for float64 (fdlibm e_log2.c scheme: log(1+f) split hi/lo, times
    a 33+53-bit 1/ln2).  Exact for powers of two.  Domain: all float64.

    max error vs correctly rounded: 1 ulp.
    """
    return _log2_64_impl(np.float64(x))


@_jit
def log10_f64(x):
    """log10(x) for float64 (fdlibm e_log10.c scheme).  Exact for powers of ten.

    Domain: all float64.  max error vs correctly rounded: 1 ulp.
    """
    return _log10_64_impl(np.float64(x))


@_jit
def sinh_f64(x):
    """sinh(x) for float64 (fdlibm formulas on a shared expm1/exp kernel).

    Domain: all float64.  max error vs correctly rounded: 2 ulp.
    """
    return _sinh64_impl(np.float64(x))


@_jit
def cosh_f64(x):
    """cosh(x) for float64 (fdlibm formulas on a shared exp kernel).

    Domain: all float64.  max error vs correctly rounded: 1 ulp.
    """
    return _cosh64_impl(np.float64(x))


@_helper
def _atan_pair32(n, d):
    """atan(n / d) as a float32 pair for 0 <= n <= d < inf (n <= 2**127): u = n/d, or
    (n - d) / (n + d) and pi/4 added for n/d in [1/2, 1] (n - d exact, n + d a pair), with
    the quotient's rounding error carried; u + u^3 P(u^2), |u| <= 1/2."""
    mid = n + n >= d
    sh, sl = _two_sum(n, d)
    num = n - d if mid else n
    den = sh if mid else d
    dl = sl if mid else _ZERO32
    u = _div(num, den)
    ul = _div(_fma(-u, den, num) - u * dl, den)
    v = u * u
    t = _fma(u * v, _p_atan32(v), ul)
    ph, pl = _two_sum(_PIO4_H32, u)
    rh = ph if mid else u
    rl = (pl + (t + _PIO4_L32)) if mid else t
    return rh, rl


@_jit
def arctan_f32(x):
    """Inverse tangent for float32, in float32: |x| > 1 through pi/2 - atan(1/|x|), the
    argument brought to |u| <= 1/2 (see ``_atan_pair32``), pairs carried to the last sum.

    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    a = abs(x)
    big = a > _ONE32
    ac = _ONE32 if a == _INF32 else a
    rh, rl = _atan_pair32(_ONE32 if big else ac, ac if big else _ONE32)
    sh, sl = _two_sum(_PIO2_H32, -rh)
    r = (sh + (sl + (_PIO2_L32 - rl))) if big else rh + rl
    r = _PIO2_H32 if a == _INF32 else r
    return _copysign32(r, x)


@_helper
def _asin_core32(u):
    """asin(u) - u = u^3 Q(u^2) for 0 <= u <= 1/2."""
    v = u * u
    return u * v * _p_asin32(v)


@_helper
def _asin_far32(a):
    """2 asin(sqrt((1 - a) / 2)) for 1/2 <= a <= 1 as a float32 pair: the square root's own
    error carried in the second part."""
    z = _HALF32 - _HALF32 * a  # exact for a in [1/2, 1]
    s = np.sqrt(z)
    sl = _div(_fma(-s, s, z), s + s) if s > _ZERO32 else _ZERO32
    return s + s, _TWO32 * (sl + _asin_core32(s))


@_jit
def arcsin_f32(x):
    """Inverse sine for float32, in float32: |x| <= 1/2: x + x^3 Q(x^2); beyond,
    pi/2 - 2 asin(sqrt((1 - |x|) / 2)) with pairs carried to the last sum.

    Domain: all float32 (nan outside [-1, 1]).  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    a = abs(x)
    near = a <= _HALF32
    fh, fl = _asin_far32(_HALF32 if near else a)
    sh, sl = _two_sum(_PIO2_H32, -fh)
    r = a + _asin_core32(a) if near else sh + (sl + (_PIO2_L32 - fl))
    r = _NAN32 if a > _ONE32 else r
    return _copysign32(r, x)


@_jit
def arccos_f32(x):
    """Inverse cosine for float32, in float32: pi/2 - asin(x) for |x| <= 1/2,
    2 asin(sqrt((1 - |x|) / 2)) beyond (subtracted from pi for x < 0), pairs carried.

    Domain: all float32 (nan outside [-1, 1]).  max error vs correctly rounded: 1 ulp.
    """
    x = _f32(x)
    a = abs(x)
    near = a <= _HALF32
    fh, fl = _asin_far32(_HALF32 if near else a)
    c = _asin_core32(a)
    nh, nl = _two_sum(_PIO2_H32, -x)
    small = nh + (nl + (_PIO2_L32 - _copysign32(c, x)))
    ph, pl = _two_sum(_PI_H32, -fh)
    left = ph + (pl + (_PI_L32 - fl))
    r = small if near else (fh + fl if x > _ZERO32 else left)
    return _NAN32 if a > _ONE32 or x != x else r


@_jit
def arctan2_f32(y, x):
    """atan2(y, x) for float32 (in float64 by a polynomial for float32's needs, rounded once);
    C99's signed zeros and infinities.  Domain: all float32 pairs.
    max error vs correctly rounded: 1 ulp.
    """
    return _f32(_atan2_32via64(np.float64(y), np.float64(x)))


@_jit
def arctan_f64(x):
    """Inverse tangent for float64.

    |x| reduced to |u| <= 1/2 (u = x, (x-1)/(x+1) or -1/x with pi/4, pi/2 in double-double),
    then u + u^3 P(u^2) (degree 12 in u^2).  Domain: all float64.
    max error vs correctly rounded: 2 ulp.
    """
    return _atan64_impl(np.float64(x))


@_jit
def arcsin_f64(x):
    """Inverse sine for float64.

    |x| <= 1/2: x + x^3 Q(x^2) (degree 12); beyond: pi/2 - 2 asin(sqrt((1-|x|)/2)) with the
    square root's error carried.  Domain: all float64 (nan outside [-1, 1]).
    max error vs correctly rounded: 2 ulp.
    """
    return _asin64_impl(np.float64(x))


@_jit
def arccos_f64(x):
    """Inverse cosine for float64 (arcsin's kernels: pi/2 - asin(x), 2 asin(sqrt((1-x)/2)),
    pi - 2 asin(sqrt((1+x)/2))).  Domain: all float64 (nan outside [-1, 1]).
    max error vs correctly rounded: 2 ulp.
    """
    return _acos64_impl(np.float64(x))


@_jit
def arctan2_f64(y, x):
    """atan2(y, x) for float64: atan of min/max of |x|, |y| (arctan's reduction), then the
    quadrant; C99's signed zeros and infinities.  Domain: all float64 pairs.
    max error vs correctly rounded: 2 ulp.
    """
    return _atan2_64_impl(np.float64(y), np.float64(x))


@_jit
def power_const_f32(x, y):
    """x**y for float32 and a constant y: an integer with |y| < 32 or a multiple of 1/4
    with |y| < 16 (other y are not computed: the code generator passes only these).

    A multiplication chain (and square roots, a reciprocal) in float64, rounded once;
    np.power's special cases.  Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    return _f32(_pow_const32via64(np.float64(_f32(x)), np.float64(_f32(y))))


@_jit
def power_const_f64(x, y):
    """x**y for float64 and a constant y: an integer with |y| < 32 or a multiple of 1/4
    with |y| < 16 (other y are not computed: the code generator passes only these).

    Integers and halves of odd integers: a multiplication chain with its errors carried, a
    square root with its residual, one reciprocal for y < 0, one rounding (x scaled by a power
    of 2 only where the result nears the ends of the range). Quarters: the mantissa's power as
    a double-double, the exponent's exactly.  np.power's special cases (y = 0.5: np.sqrt's).
    Domain: all float64.  max error vs correctly rounded: 1 ulp.
    """
    x = np.float64(x)
    halves = 2.0 * y == int(2.0 * y) and y != 0.0  # y is the code generator's constant: folds
    r = _pow_halves64(x, int(2.0 * y)) if halves else _pow_const64(x, np.float64(y))
    return np.sqrt(x) if y == 0.5 else r  # NumPy's x ** 0.5 (its -0.0 and nan for -inf)


# ---------------------------------------------------------------------------
# inverse hyperbolic functions, cube root, hypot (fdlibm's formulas, branch-free)
# ---------------------------------------------------------------------------

_LN2_64 = _h("0x1.62e42fefa39efp-1")
_SQRT2_M1 = _h("0x1.a827999fcef34p-2")  # sqrt(2) - 1
_SQRTH_M1 = _h("-0x1.2bec333018866p-2")  # sqrt(1/2) - 1
_TWO28 = 268435456.0
_TWO_M28 = 2.0**-28
_TWO_M18 = 2.0**-18
_CBRT_P = (1.87595182427177009643, -1.88497979543377169875, 1.621429720105354466140,
           -0.758397934778766047437, 0.145996192886612446982)  # fmt: skip
_CBRT_B1 = 715094163  # (1023 - 1023/3 - 0.03306235651) * 2**20, fdlibm s_cbrt.c
_THIRD = 1.0 / 3.0
_CBRT2 = _h("0x1.428a2f98d728bp+0")  # 2**(1/3)
_CBRT4 = _h("0x1.965fea53d6e3dp+0")  # 4**(1/3)


@_helper
def _asinh64_impl(x):
    a = abs(x)
    ac = _TWO28 if a > _TWO28 else a  # the branches not taken stay finite
    big = a >= _TWO28
    q = np.sqrt(_fma(ac, ac, 1.0))
    far = _log64_impl(a if big else _fma(2.0, ac, _div(1.0, q + ac)))
    far = far + _LN2_64 if big else far
    near = _log1p64_impl(ac + _div(ac * ac, 1.0 + q))
    res = near if ac <= 2.0 else far
    res = a if a < _TWO_M28 else res
    return _copysign64(res, x)


@_helper
def _acosh64_impl(x):
    xc = _TWO28 if x > _TWO28 else x
    t = xc - 1.0
    big = x >= _TWO28
    far = _log64_impl(x if big else _fma(2.0, xc, -_div(1.0, xc + np.sqrt(_fma(xc, xc, -1.0)))))
    far = far + _LN2_64 if big else far
    near = _log1p64_impl(t + np.sqrt(_fma(t, t, t + t)))
    res = near if xc <= 2.0 else far
    return _NAN if x < 1.0 else res


@_helper
def _atanh64_impl(x):
    a = abs(x)
    t = a + a
    one_minus = 1.0 - a
    near = 0.5 * _log1p64_impl(_fma(t, _div(a, one_minus), t))
    far = 0.5 * _log1p64_impl(_div(t, one_minus))
    res = near if a < 0.5 else far
    res = a if a < _TWO_M28 else res
    res = _NAN if a > 1.0 else res
    return _copysign64(res, x)


@_helper
def _cbrt64_impl(x):
    """fdlibm s_cbrt.c: an exponent-thirds estimate, a polynomial to 23 bits, rounding to 32
    bits, one Newton step (0.667 ulp); subnormals scaled by 2**54 first."""
    a = abs(x)
    sub = a < _MINNORM64
    xs = a * _TWO54 if sub else a
    hi = _as_int(xs) >> 32
    third = _as_int(_fma(_int_to_f64(hi), _THIRD, _SHD)) - _SHD_BITS  # round(hi / 3)
    t = _as_f64((third + _CBRT_B1) << 32)
    r = (t * t) * _div(t, xs)
    p = _fma(_fma(r, _CBRT_P[2], _CBRT_P[1]), r, _CBRT_P[0])
    t = t * _fma((r * r) * r, _fma(r, _CBRT_P[4], _CBRT_P[3]), p)
    t = _as_f64((_as_int(t) + 0x80000000) & -1073741824)  # to 32 bits, away from zero
    s = t * t
    r = _div(xs, s)
    r = _div(r - t, (t + t) + r)
    t = _fma(t, r, t)
    t = t * _TWO_M18 if sub else t
    t = a if (a == 0.0) | (a == _INF) | (a != a) else t
    return _copysign64(t, x)


@_helper
def _hypot64_impl(x, y):
    """sqrt(x*x + y*y) with both scaled by one power of two (the larger near 1): no overflow
    or underflow in the square, one fused multiply-add, one square root."""
    ax, ay = abs(x), abs(y)
    a = ax if ax > ay else ay
    b = ay if ax > ay else ax
    e = _as_int(a) >> 52
    e = 1 if e < 1 else e
    e = 2045 if e > 2045 else e
    scale = _as_f64((2046 - e) << 52)
    sa, sb = a * scale, b * scale
    res = np.sqrt(_fma(sa, sa, sb * sb)) * _as_f64(e << 52)
    return _INF if (ax == _INF) | (ay == _INF) else res


@_helper
def _cbrt32via64(x):
    """cbrt of a float32 x in float64, without division: |x| = 2**(3q + k) m, m in [1, 2),
    k in {0, 1, 2} (every float32 is a normal float64); r ~ m**(-1/3) by a cubic (2**-11.7),
    two Newton steps r + r (1 - m r**3) / 3 (2**-43), then m r**2 cbrt(2**k) 2**q."""
    a = abs(x)
    bits = _as_int(a)
    n = (bits >> 52) - 873  # e + 150, e the exponent: in [1, 277] for a float32 other than 0
    q = (n * 21846) >> 16  # n // 3 for those n
    k = n - 3 * q
    m = _as_f64((bits & _MANT64) | 0x3FF0000000000000)
    r = _p_rcbrt32(m)
    r = _fma(r * _THIRD, _fma(-m * r, r * r, 1.0), r)
    r = _fma(r * _THIRD, _fma(-m * r, r * r, 1.0), r)
    root = (m * r) * r * (_CBRT2 if k == 1 else (_CBRT4 if k == 2 else 1.0))
    res = root * _as_f64((q - 50 + 1023) << 52)
    res = a if (a == 0.0) | (a == _INF) | (a != a) else res
    return _copysign64(res, x)


# float32 in float64: the squares cannot overflow and log1p's argument is never cancelled, so
# one formula over the whole range (fdlibm needs three for float64), and log1p to float32's
# needs (``_log1p32via64``).
@_helper
def _asinh32via64(x):
    a = abs(x)
    res = _log1p32via64(a + _div(a * a, 1.0 + np.sqrt(_fma(a, a, 1.0))))
    return _copysign64(a if a == _INF else res, x)


@_helper
def _acosh32via64(x):
    t = x - 1.0
    res = _log1p32via64(t + np.sqrt(_fma(t, t, t + t)))
    return _NAN if x < 1.0 else res


@_helper
def _atanh32via64(x):
    a = abs(x)
    return _copysign64(0.5 * _log1p32via64(_div(a + a, 1.0 - a)), x)


@_helper
def _log1p32via64(v):
    """log1p(v) to 2**-37 relative, for results rounded to float32: 1 + v = 2**e (1 + f) with
    f = v itself (exact) for v in [sqrt(1/2) - 1, sqrt2 - 1], else from 1 + v rounded (an
    error of 2**-53 against a logarithm of 0.34 or more), and log2(1 + f) as float32 pow's."""
    ix = _as_int(1.0 + v) - _SQRTH64_BITS
    small = (v >= _SQRTH_M1) & (v <= _SQRT2_M1)
    f = v if small else _as_f64((ix & _MANT64) + _SQRTH64_BITS) - 1.0
    res = ((0.0 if small else _int_to_f64(ix >> 52)) + _log2_1p32via64(f)) * _LN2_64
    res = -_INF if v == -1.0 else res
    res = _NAN if v < -1.0 else res
    return res if v < _INF else v  # (+inf, nan)


@_jit
def arcsinh_f32(x):
    """Inverse hyperbolic sine for float32 (one log1p formula in float64 with float32
    pow's log2, rounded once).

    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    return _f32(_asinh32via64(np.float64(x)))


@_jit
def arccosh_f32(x):
    """Inverse hyperbolic cosine for float32 (one log1p formula in float64 with float32
    pow's log2, rounded once).

    Domain: all float32 (nan below 1).  max error vs correctly rounded: 1 ulp.
    """
    return _f32(_acosh32via64(np.float64(x)))


@_jit
def arctanh_f32(x):
    """Inverse hyperbolic tangent for float32 (one log1p formula in float64 with float32
    pow's log2, rounded once).

    Domain: all float32 (+-inf at +-1, nan beyond).  max error vs correctly rounded: 1 ulp.
    """
    return _f32(_atanh32via64(np.float64(x)))


@_jit
def cbrt_f32(x):
    """Cube root for float32 (in float64 without division, ``_cbrt32via64``, rounded once).

    Domain: all float32.  max error vs correctly rounded: 1 ulp.
    """
    return _f32(_cbrt32via64(np.float64(x)))


@_jit
def hypot_f32(x, y):
    """sqrt(x*x + y*y) for float32, in float64 (no scaling needed), rounded once; inf if
    either is infinite, even with a nan.  Domain: all float32 pairs.
    max error vs correctly rounded: 1 ulp.
    """
    ax, ay = abs(np.float64(x)), abs(np.float64(y))
    res = _f32(np.sqrt(_fma(ax, ax, ay * ay)))
    return _INF32 if (ax == _INF) | (ay == _INF) else res


@_helper
def _logaddexp64_impl(x, y):
    """NumPy's formula max + log1p(exp(-|x - y|)); x + ln2 where x == y (infinities too)."""
    d = x - y
    m = x if d > 0.0 else y
    res = m + _log1p64_impl(_exp64_impl(-abs(d)))
    return x + _LN2_64 if x == y else res


@_jit
def logaddexp_f32(x, y):
    """log(exp(x) + exp(y)) for float32: NumPy's formula max + log1p(exp(-|x - y|)) in float64
    (x - y exact) with float32 pow's polynomials (``_logaddexp32via64``), rounded once; x + ln2
    where x == y (infinities too). Domain: all float32 pairs.  max error vs correctly rounded:
    1 ulp where the result is at least 0.001 in magnitude; below, absolute error at most
    2**-34 (the sum cancels near the zero of e**x + e**y = 1; NumPy's float32 loop errs by
    about 2**-24 there).
    """
    return _f32(_logaddexp32via64(np.float64(x), np.float64(y)))


@_helper
def _logaddexp32via64(x, y):
    """max + log1p(u), u = 2**t = exp(-|x - y|) <= 1 (``_exp2_32via64``: t clamped at -200,
    u stays a normal float64), log1p(u) = log2(1 + f) ln2 + (1 if u > sqrt2 - 1) with
    f = u or (u - 1)/2, both exact, in [sqrt(1/2) - 1, sqrt2 - 1]."""
    d = x - y
    m = x if d > 0.0 else y
    u = _exp2_32via64(-abs(d) * _L2E64)
    big = u > _SQRT2_M1
    log2u1 = _log2_1p32via64(0.5 * (u - 1.0) if big else u) + (1.0 if big else 0.0)
    res = _fma(log2u1, _LN2_64, m)
    res = _NAN if d != d else res  # (a nan; inf - inf is x == y below)
    return x + _LN2_64 if x == y else res


@_jit
def logaddexp_f64(x, y):
    """log(exp(x) + exp(y)) for float64: NumPy's formula max + log1p(exp(-|x - y|)) with this
    module's exp and log1p; x + ln2 where x == y (infinities too).  Domain: all float64 pairs.
    max error vs correctly rounded: 2 ulp where the result is at least 1 in magnitude; below,
    absolute error at most 2**-51, the class of NumPy's own loop: the sum cancels near the
    zero of e**x + e**y = 1, where a result within ulps would need double-double exp and log1p.
    """
    return _logaddexp64_impl(np.float64(x), np.float64(y))


@_jit
def arcsinh_f64(x):
    """Inverse hyperbolic sine for float64 (fdlibm s_asinh.c: log1p(|x| + x^2/(1 +
    sqrt(1 + x^2))) up to 2, log(2|x| + 1/(sqrt(x^2 + 1) + |x|)) up to 2**28, log|x| + ln2
    beyond).  asinh(-0.0) = -0.0.  Domain: all float64.
    max error vs correctly rounded: 2 ulp.
    """
    return _asinh64_impl(np.float64(x))


@_jit
def arccosh_f64(x):
    """Inverse hyperbolic cosine for float64 (fdlibm e_acosh.c: log1p(t + sqrt(2t + t^2)),
    t = x - 1, up to 2, log(2x - 1/(x + sqrt(x^2 - 1))) up to 2**28, log x + ln2 beyond).
    Domain: all float64 (nan below 1).  max error vs correctly rounded: 2 ulp.
    """
    return _acosh64_impl(np.float64(x))


@_jit
def arctanh_f64(x):
    """Inverse hyperbolic tangent for float64 (fdlibm e_atanh.c: log1p(2x + 2x^2/(1 - x))/2
    below 1/2, log1p(2x/(1 - x))/2 beyond).  Domain: all float64 (+-inf at +-1, nan beyond).
    max error vs correctly rounded: 2 ulp.
    """
    return _atanh64_impl(np.float64(x))


@_jit
def cbrt_f64(x):
    """Cube root for float64 (fdlibm s_cbrt.c, see ``_cbrt64_impl``).

    Domain: all float64.  max error vs correctly rounded: 1 ulp.
    """
    return _cbrt64_impl(np.float64(x))


@_jit
def hypot_f64(x, y):
    """sqrt(x*x + y*y) for float64 without overflow or underflow; inf if either is infinite,
    even with a nan.  Domain: all float64 pairs.  max error vs correctly rounded: 1 ulp.
    """
    return _hypot64_impl(np.float64(x), np.float64(y))


# ---------------------------------------------------------------------------
# public registry
# ---------------------------------------------------------------------------

OPS = (
    "exp",
    "expm1",
    "log",
    "log1p",
    "tanh",
    "sigmoid",
    "erf",
    "sin",
    "cos",
    "power",
    "exp2",
    "log2",
    "log10",
    "sinh",
    "cosh",
    "tan",
    "arctan",
    "arcsin",
    "arccos",
    "arctan2",
    "arcsinh",
    "arccosh",
    "arctanh",
    "cbrt",
    "hypot",
    "logaddexp",
)

_F32_DT = np.dtype(np.float32)
_F64_DT = np.dtype(np.float64)
_SUFFIX = {_F32_DT: "f32", _F64_DT: "f64"}

for _name in _PUBLIC:  # numba functions from here on, made on first use (``__getattr__``)
    del globals()[_name]
del _name

_lock = threading.Lock()
_made: dict = {}  # public name -> its numba dispatcher
_cache_class = None  # numba's function cache the dispatchers made from now on use (cache_in)


def _dispatcher(name: str):
    """The numba function ``name`` (``sin_f64``), made on its first use: flattening one costs
    a few milliseconds, and a process calls a few of them."""
    with _lock:
        made = _made.get(name)
        if made is None:
            made = _made[name] = globals()[name] = _numba_function(name, _cache_class)
    return made


def _numba_function(name: str, cache_class):
    """A new numba function for the public function ``name``, its machine code kept by
    ``cache_class`` (None: in this process only)."""
    code = _installed_flat_code().get(name)
    if code is not None:  # as :func:`_flatten` makes it, without the work
        flat = FunctionType(code, globals(), name)
        flat.__doc__ = _PUBLIC[name].__doc__
    else:
        flat = _flatten(_PUBLIC[name])
    made = njit(**_OPTS)(flat)
    if cache_class is not None:
        try:
            made._cache = cache_class(flat)
        except Exception:  # numba's (private) cache classes changed: this process only
            pass
    return made


def __getattr__(name: str):
    if name in _PUBLIC:
        return _dispatcher(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_PUBLIC})


class _Dispatchers(Mapping):
    """``key -> numba function``, each made on first access (:func:`_dispatcher`)."""

    def __init__(self, names: dict):
        self._names = names  # key -> public name

    def __getitem__(self, key):
        return _dispatcher(self._names[key])

    def __contains__(self, key):
        return key in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)


FAST_MATH = _Dispatchers(  # an op may have a fast version for one of the dtypes only
    {
        (op, dt): f"{op}_{sfx}"
        for op in OPS
        for dt, sfx in _SUFFIX.items()
        if f"{op}_{sfx}" in _PUBLIC
    }
)


def name_for(op: str, dtype) -> str | None:
    """Global name (``fm_<op>_<f32|f64>``) of the fast version of `op`, or None."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    if (op, dt) not in FAST_MATH:
        return None
    return f"fm_{op}_{_SUFFIX[dt]}"


# x ** c for a constant c the code generator reduces to multiplications (``power_const_*``)
POWER_CONST = _Dispatchers({dt: f"power_const_{sfx}" for dt, sfx in _SUFFIX.items()})


# op -> (its version without the large-argument path, the test of the arguments it misses)
NEAR = _Dispatchers(
    {(op, dt): f"{op}_near_{sfx}" for op in ("sin", "cos", "tan") for dt, sfx in _SUFFIX.items()}
)
FAR = _Dispatchers({dt: f"trig_far_{sfx}" for dt, sfx in _SUFFIX.items()})


def near_names(op: str, dtype) -> tuple | None:
    """``(near, far)``: the global names of ``op``'s version for ordinary arguments at
    ``dtype`` and of the test (1 or 0) of an argument it does not cover; None where ``op`` has
    one version only. A loop computing ``near(x)`` and adding up ``far(x)`` is exact where the
    sum is 0.

    >>> near_names("sin", np.float64)
    ('fm_sin_near_f64', 'fm_trig_far_f64')
    """
    dt = np.dtype(dtype)
    if (op, dt) not in NEAR:
        return None
    return f"fm_{NEAR._names[(op, dt)]}", f"fm_{FAR._names[dt]}"


def power_const_name(dtype) -> str | None:
    """Global name (``fm_power_const_<f32|f64>``) of ``power_const`` at ``dtype``, or None."""
    dt = np.dtype(dtype)
    return f"fm_power_const_{_SUFFIX[dt]}" if dt in POWER_CONST else None


INSTALLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fastmath_cache")
"""Machine code of every public function compiled at install (:func:`precompile`, which
``make setup`` runs), like a compiled extension's: numba's cache files, whose entries are keyed
by this file's content, the argument types and the CPU (its name and features), so that a
machine with another CPU, or an edited file, finds no entry there and compiles."""


def cache_in(folder: str) -> bool:
    """Keep the public functions' machine code in ``folder``: numba's disk cache, keyed by this
    file's content, the argument types and the CPU, so that a new process loads them (their
    bitcode too, which LLVM still inlines into a calling loop) instead of compiling them again
    (a few tenths of a second each for ``sin_f64``/``power_f64``). A function is looked up in
    :data:`INSTALLED` first. Functions this process compiled already are left as they are;
    those made later (on first use) use the folder too. False where numba's cache cannot be
    used there."""
    global _cache_class
    with _lock:
        try:
            cache_class = _folder_cache(folder, installed=INSTALLED)
            todo = [fn for fn in _made.values() if not fn.overloads]
            caches = [cache_class(fn.py_func) for fn in todo]
        except Exception:  # an unwritable folder, or numba's (private) cache classes changed
            return False
        for fn, cache in zip(todo, caches):
            fn._cache = cache
        _cache_class = cache_class
    return True


def precompile(folder: str | None = None, names=None) -> list[str]:
    """Compile the public functions (``names``, default all), each for scalars of its own
    dtype, into numba's cache in ``folder`` (default :data:`INSTALLED`), replacing what it
    held: the library's install step, once per machine (about half a minute), after which a
    new process loads them instead of compiling them. The names compiled are returned.

    >>> import tempfile
    >>> precompile(tempfile.mkdtemp(), ["exp2_f32"])
    ['exp2_f32']
    """
    folder = folder or INSTALLED
    names = list(names or _PUBLIC)
    os.makedirs(folder, exist_ok=True)
    for old in glob.glob(os.path.join(folder, "*.nb[ic]")) + glob.glob(_flat_code_path(folder)):
        os.unlink(old)
    _installed_flat_code.cache_clear()
    cache_class = _folder_cache(folder, strict=True)
    flat = {}
    for name in names:
        made = _numba_function(name, cache_class)
        made.compile(_own_signature(name))
        flat[name] = made.py_func.__code__
    with open(_flat_code_path(folder), "wb") as f:
        marshal.dump({"source": _file_digest(), "code": flat}, f)
    return names


def _flat_code_path(folder: str) -> str:
    """The flat functions' code objects (as :func:`marshal` writes them for this Python)."""
    return os.path.join(folder, f"flat.{sys.implementation.cache_tag}.marshal")


def _file_digest() -> str:
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@functools.cache
def _installed_flat_code() -> dict:
    """``{name: code}`` of the flat functions :func:`precompile` kept in :data:`INSTALLED`,
    where this file is the one they were made from (else empty: they are flattened here)."""
    try:
        with open(_flat_code_path(INSTALLED), "rb") as f:
            kept = marshal.load(f)
        return kept["code"] if kept["source"] == _file_digest() else {}
    except Exception:  # none kept, or kept by another Python
        return {}


def _own_signature(name: str) -> tuple:
    """The argument types of the public function ``name`` at its own dtype."""
    dtype = types.float32 if name.endswith("_f32") else types.float64
    return (dtype,) * _PUBLIC[name].__code__.co_argcount


def _folder_cache(folder: str, installed: str | None = None, strict: bool = False):
    """numba's function cache, kept in ``folder`` (its own locators look beside the source),
    loading from ``installed`` (read only) first where that folder exists; ``strict``: a
    failure to save raises (else the function stays in this process only)."""
    from numba.core import caching

    class Locator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file, self._lineno = py_file, py_func.__code__.co_firstlineno

        def get_cache_path(self):
            return folder

        @classmethod
        def from_function(cls, py_func, py_file):
            return cls(py_func, py_file)  # the folder is made on the first save

    class Impl(caching.CompileResultCacheImpl):
        _locator_classes = [Locator]

    first = _folder_cache(installed) if installed and os.path.isdir(installed) else None

    class FolderCache(caching.FunctionCache):
        _impl_class = Impl

        def __init__(self, py_func):
            super().__init__(py_func)
            self._first = first(py_func) if first is not None else None

        def load_overload(self, sig, target_context):
            for cache in (self._first, super()):
                try:
                    loaded = cache and cache.load_overload(sig, target_context)
                except Exception:  # a damaged or vanished entry: compiled again, and rewritten
                    loaded = None
                if loaded is not None:
                    return loaded
            return None

        def save_overload(self, sig, data):
            try:
                super().save_overload(sig, data)
            except Exception:  # an unwritable folder: the function stays in this process only
                if strict:
                    raise

    return FolderCache


_NAMESPACE = _Dispatchers(
    {
        f"fm_{name}": name
        for table in (FAST_MATH, POWER_CONST, NEAR, FAR)
        for name in table._names.values()
    }
)


def namespace() -> Mapping:
    """``{"fm_exp_f32": dispatcher, ...}`` for generated source's globals (each dispatcher made
    when it is first looked up)."""
    return _NAMESPACE
