"""Scalar expressions for elementwise ops, as source text, for the numba code generators.

``expr(node, args, dtypes, math)`` returns the source of one element of ``node``'s output, given
the source and dtype of each input element. Casts follow NumPy's ufunc loop resolution, so the
generated code computes in exactly the dtypes the interpreter does. The CUDA emitter overrides
entries of ``TEMPLATES`` where the device differs and has device helpers of its own (the CPU
target's helpers are in ``cpu_helpers.py``).
"""

from __future__ import annotations

import contextlib
import math as _math

import numpy as np

from ..ir import Node, Var


def ctor(dtype) -> str:
    """The numba-callable constructor for ``dtype``: ``np.float32``."""
    return f"np.{np.dtype(dtype).name}"


def cast(src: str, frm, to) -> str:
    frm, to = np.dtype(frm), np.dtype(to)
    if frm == to:
        return src
    if to.kind == "b":
        return f"({src} != 0)"
    if frm.kind == "c" and to.kind != "c":
        return f"{ctor(to)}(({src}).real)"
    if frm.kind == "b":
        return f"{ctor(to)}(1 if {src} else 0)"
    return f"{ctor(to)}({src})"


def literal(x, dtype) -> str:
    """Source for a constant ``x`` as a value of ``dtype``; float16's as float32's (numba has
    no float16 scalars; the value is exact in float32, and an op of one computes in a wider
    dtype where it compiles: fuzz seed 25900171's ``np.imag`` of a float16 number)."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        dtype = np.dtype(np.float32)
    if isinstance(x, np.ndarray):
        x = x[()]
    if isinstance(x, np.generic):
        x = x.item()
    if dtype.kind == "b":
        return "True" if x else "False"
    if dtype.kind == "c":
        c = complex(x)
        return f"{ctor(dtype)}(complex({_float_src(c.real)}, {_float_src(c.imag)}))"
    if dtype.kind == "f":
        return f"{ctor(dtype)}({_float_src(float(x))})"
    return f"{ctor(dtype)}({int(x)})"


def _float_src(v: float) -> str:
    if _math.isnan(v):
        return "np.nan"
    if _math.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(v)


def pyop_name(node: Node) -> str:
    """A name for a python op's numba function in generated code, stable across processes and
    different for different functions (it is part of the disk cache key)."""
    import hashlib

    fn = node.attrs["pyop"].fn
    py = getattr(fn, "py_func", None) or getattr(getattr(fn, "_dispatcher", None), "py_func", fn)
    code = getattr(py, "__code__", None)
    ident = f"{getattr(py, '__module__', '')}.{getattr(py, '__qualname__', '')}"
    if code is not None:
        ident += repr((code.co_code, code.co_consts, code.co_names))
    if py is not fn and not hasattr(fn, "py_func"):  # a ufunc's function, called as @njit
        ident += " as njit"
    return "pyop_" + hashlib.sha256(ident.encode()).hexdigest()[:16]


def _pytype(x):
    """What NumPy's loop resolution sees for an input: a dtype, or a Python type if weak."""
    if isinstance(x, Var):
        return {"f": float, "c": complex}.get(x.dtype.kind, x.dtype) if x.weak else x.dtype
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, np.generic):  # np.float64 subclasses float, but is a strong NumPy type
        return x.dtype
    if isinstance(x, int | float | complex):
        return type(x)
    return np.asarray(x).dtype


def loop_dtypes(node: Node) -> tuple[list, np.dtype]:
    """(input dtypes the loop computes in, output dtype) for a ufunc node."""
    from ..ops import OPS

    uf = OPS[node.op].ufunc
    resolved = uf.resolve_dtypes(tuple(_pytype(x) for x in node.inputs) + (None,) * uf.nout)
    return list(resolved[: uf.nin]), resolved[uf.nin]


# ---------------------------------------------------------------------- per-op templates
# Each template maps (argument sources, loop dtype) to an expression.
def _infix(op):
    return lambda a, dt: f"({a[0]} {op} {a[1]})"


def _call(fn):
    return lambda a, dt: f"{fn}({', '.join(a)})"


def _is_float(dt) -> bool:
    return np.dtype(dt).kind == "f"


TEMPLATES = {
    "add": lambda a, dt: f"({a[0]} | {a[1]})" if dt.kind == "b" else f"({a[0]} + {a[1]})",
    "subtract": _infix("-"),
    "multiply": lambda a, dt: f"({a[0]} & {a[1]})" if dt.kind == "b" else f"({a[0]} * {a[1]})",
    "divide": _infix("/"),
    "negative": lambda a, dt: f"(-{a[0]})",
    "positive": lambda a, dt: f"(+{a[0]})" if dt.kind != "b" else a[0],
    "square": lambda a, dt: f"({a[0]} * {a[0]})",
    "equal": _infix("=="),
    "not_equal": _infix("!="),
    "less": _infix("<"),
    "less_equal": _infix("<="),
    "greater": _infix(">"),
    "greater_equal": _infix(">="),
    "logical_and": lambda a, dt: f"(({a[0]} != 0) & ({a[1]} != 0))",
    "logical_or": lambda a, dt: f"(({a[0]} != 0) | ({a[1]} != 0))",
    "logical_xor": lambda a, dt: f"(({a[0]} != 0) != ({a[1]} != 0))",
    "logical_not": lambda a, dt: f"({a[0]} == 0)",
    "bitwise_and": _infix("&"),
    "bitwise_or": _infix("|"),
    "bitwise_xor": lambda a, dt: f"({a[0]} != {a[1]})" if dt.kind == "b" else f"({a[0]} ^ {a[1]})",
    "invert": lambda a, dt: f"(not {a[0]})" if dt.kind == "b" else f"(~{a[0]})",
    "left_shift": _call("_lshift"),
    "right_shift": _call("_rshift"),
    "maximum": lambda a, dt: (
        f"_maximum({a[0]}, {a[1]})" if dt.kind in "fc" else f"max({a[0]}, {a[1]})"
    ),
    "minimum": lambda a, dt: (
        f"_minimum({a[0]}, {a[1]})" if dt.kind in "fc" else f"min({a[0]}, {a[1]})"
    ),
    "fmax": lambda a, dt: f"_fmax({a[0]}, {a[1]})" if dt.kind in "fc" else f"max({a[0]}, {a[1]})",
    "fmin": lambda a, dt: f"_fmin({a[0]}, {a[1]})" if dt.kind in "fc" else f"min({a[0]}, {a[1]})",
    "floor_divide": lambda a, dt: f"_floor_divide({a[0]}, {a[1]})",
    "remainder": lambda a, dt: f"_remainder({a[0]}, {a[1]})",
    "power": lambda a, dt: f"_ipow({a[0]}, {a[1]})" if dt.kind in "iu" else f"({a[0]} ** {a[1]})",
    "float_power": lambda a, dt: f"({a[0]} ** {a[1]})",  # its loops are float64 and complex
    "reciprocal": lambda a, dt: f"_ireciprocal({a[0]})" if dt.kind in "iu" else f"(1 / {a[0]})",
    "absolute": lambda a, dt: f"abs({a[0]})",
    "sign": lambda a, dt: f"_csign({a[0]})" if dt.kind == "c" else f"np.sign({a[0]})",
    "heaviside": lambda a, dt: (  # NaN stays NaN, h at zero (either sign)
        f"({a[0]} if {a[0]} != {a[0]} else ({a[1]} if {a[0]} == 0 else "
        f"({literal(0, dt)} if {a[0]} < 0 else {literal(1, dt)})))"
    ),
    "conjugate": lambda a, dt: f"np.conj({a[0]})" if dt.kind == "c" else a[0],
    "rint": lambda a, dt: f"np.rint({a[0]})",
    "floor": lambda a, dt: f"np.floor({a[0]})" if dt.kind == "f" else a[0],
    "ceil": lambda a, dt: f"np.ceil({a[0]})" if dt.kind == "f" else a[0],
    "trunc": lambda a, dt: f"np.trunc({a[0]})" if dt.kind == "f" else a[0],
    "isnan": lambda a, dt: f"np.isnan({a[0]})" if dt.kind in "fc" else "False",
    "isinf": lambda a, dt: f"np.isinf({a[0]})" if dt.kind in "fc" else "False",
    "isfinite": lambda a, dt: f"np.isfinite({a[0]})" if dt.kind in "fc" else "True",
    "signbit": lambda a, dt: f"np.signbit({a[0]})",
}

_I64 = np.dtype(np.int64)


def _wrapping(plain, helper, square=False):
    """``plain``'s template, or the wrapping helper for int64 (see ``_wadd``)."""

    def template(a, dt):
        if dt != _I64:
            return plain(a, dt)
        return f"{helper}({a[0]}, {a[0]})" if square else f"{helper}({', '.join(a)})"

    return template


for _op, _helper in (("add", "_wadd"), ("subtract", "_wsub"), ("multiply", "_wmul")):
    TEMPLATES[_op] = _wrapping(TEMPLATES[_op], _helper)
TEMPLATES["negative"] = _wrapping(TEMPLATES["negative"], "_wneg")
TEMPLATES["absolute"] = _wrapping(TEMPLATES["absolute"], "_wabs")
TEMPLATES["square"] = _wrapping(TEMPLATES["square"], "_wmul", square=True)

# The helpers the templates call (``_maximum``, ``_wadd``, ``_cdiv``, ...) are numba functions in
# ``cpu_helpers.py``, defined once per process; a generated CPU module imports those it calls.


def _numpy_uses_fma() -> bool:
    """NumPy's SIMD loops (complex multiply and absolute) fuse multiply-adds on this CPU."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as f
    except ImportError:  # pragma: no cover
        return False
    return bool(f.get("FMA3") or f.get("AVX512F"))


NUMPY_FMA = _numpy_uses_fma()


def _make_fma():
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    @intrinsic
    def _fma(typingctx, a, b, c):
        """``a * b + c`` rounded as NumPy's loops round it here (fused when NumPy fuses)."""
        if isinstance(a, types.Float) and a == b == c:

            def codegen(context, builder, sig, args):
                if not NUMPY_FMA:
                    return builder.fadd(builder.fmul(args[0], args[1]), args[2])
                lty = args[0].type
                fn = builder.module.declare_intrinsic(
                    "llvm.fma", [lty], ir.FunctionType(lty, [lty, lty, lty])
                )
                return builder.call(fn, args)

            return a(a, a, a), codegen
        return None

    return _fma


def _make_kernel_intrinsics() -> dict:
    """Float accumulator steps LLVM may vectorise: ``_acc_add``/``_acc_mul`` carry the
    ``reassoc`` flag on this one instruction (nothing else in a kernel is reassociated), and
    ``_acc_max``/``_acc_min`` are ``llvm.maximum``/``llvm.minimum`` (NaN-propagating, like
    NumPy's max and min). A row is then summed in vector lanes, in an order of LLVM's choosing:
    the same order on every call, another one than NumPy's pairwise sum.

    ``_wide_vectors()`` marks the function it is called in with ``prefer-vector-width=512``:
    LLVM otherwise keeps to 256-bit vectors on AVX-512 CPUs (a tuning for other code than
    these kernels); elsewhere it changes nothing. A kernel calls it first thing, and so does
    every ``prange`` body (numba compiles those as functions of their own)."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    def float_pair(emit):
        """An intrinsic of two floats of one type: ``emit(builder, args)`` gives the value."""

        def typer(typingctx, a, b):
            if isinstance(a, types.Float) and a == b:
                return a(a, b), lambda context, builder, sig, args: emit(builder, args)
            return None

        return intrinsic(typer)

    def arith(kind):
        return float_pair(lambda b, args: getattr(b, kind)(*args, flags=("reassoc",)))

    def extremum(name):
        def emit(builder, args):
            lty = args[0].type
            fn = builder.module.declare_intrinsic(name, [lty], ir.FunctionType(lty, [lty, lty]))
            return builder.call(fn, args)

        return float_pair(emit)

    @intrinsic
    def wide_vectors(typingctx):
        def codegen(context, builder, sig, args):
            # llvmlite checks attribute names against a list without key="value" ones
            attrs = builder.function.attributes
            if isinstance(attrs, set):  # a speed hint: without it the kernel is still right
                set.add(attrs, '"prefer-vector-width"="512"')
            return context.get_dummy_value()

        return types.none(), codegen

    return {
        "_wide_vectors": wide_vectors,
        "_acc_add": arith("fadd"),
        "_acc_mul": arith("fmul"),
        "_acc_max": extremum("llvm.maximum"),
        "_acc_min": extremum("llvm.minimum"),
    }


KERNEL_INTRINSICS = ("_wide_vectors", "_acc_add", "_acc_mul", "_acc_max", "_acc_min")


# Pairs of arrays a vectorised loop may compare at run time to rule out overlap (LLVM's
# defaults, 8 and 128, are set for loops over a few arrays): a fused stencil kernel reads and
# writes dozens (isoneutral's: 19 read, 19 written, about 360 pairs), and past the limit LLVM
# leaves the whole loop scalar (its 16 tanh per element: 3x slower).
ALIAS_CHECKS = 4096


def _allow_alias_checks():
    """Let LLVM vectorise loops over many arrays behind run-time overlap checks, and loops
    that read an array at neighbouring offsets (once per process: LLVM's options are its own,
    read when a loop is optimised)."""
    import llvmlite.binding as llvm

    for option in (
        "runtime-memory-check-threshold",
        "vectorize-memory-check-threshold",
        "memory-check-merge-threshold",
    ):
        llvm.set_option("tracekit", f"-{option}={ALIAS_CHECKS}")
    # GVN's load PRE across iterations: where a loop reads ``a[i + 1]`` and ``a[i]`` of
    # arrays it does not write (noalias: a chunk kernel), it keeps the first load for the next
    # iteration, a scalar value carried around the loop; the vectoriser then left
    # isoneutral's stencil loop scalar (320 packed operations in its machine code, against
    # 7,414 without it)
    llvm.set_option("tracekit", "-enable-load-in-loop-pre=false")


@contextlib.contextmanager
def interleaved_loops(count: int, vector_tail: bool = True):
    """Inside the block, LLVM's loop vectoriser interleaves ``count`` vector iterations of each
    loop it vectorises (``count`` 0: its own choice); without ``vector_tail``, the iterations
    after the last interleaved one are left to the scalar loop (LLVM writes a vector loop for
    them where vector width x ``count`` reaches 16: one more copy of the body to compile).
    LLVM's options are the process's: the block holds numba's compiler lock, so no other
    compile runs under the options."""
    if not count:
        yield
        return
    import llvmlite.binding as llvm
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        llvm.set_option("tracekit", f"-force-vector-interleave={count}")
        llvm.set_option("tracekit", f"-enable-epilogue-vectorization={str(vector_tail).lower()}")
        try:
            yield
        finally:
            llvm.set_option("tracekit", "-force-vector-interleave=0")
            llvm.set_option("tracekit", "-enable-epilogue-vectorization=true")


def __getattr__(name):  # the intrinsics are built on first use (numba imports are slow)
    if name == "_NO_LOOP_FUSION":
        # numba reads a dict of parallel options by popping its keys, so a dispatcher's dict is
        # empty after its first compile and a second one (a read-only argument) would fuse
        # loops; an instance is copied instead
        from numba.core.cpu_options import ParallelOptions

        globals()[name] = options = ParallelOptions({"fusion": False})
        return options
    if name == "_fma":
        globals()["_fma"] = fn = _make_fma()
        return fn
    if name in KERNEL_INTRINSICS:
        _allow_alias_checks()
        globals().update(_make_kernel_intrinsics())
        return globals()[name]
    raise AttributeError(name)


def _one(dt) -> str:
    """The literal 1 of ``dt``'s real type (what the helpers compute in)."""
    dt = np.dtype(dt)
    return literal(1, np.dtype(f"f{dt.itemsize // 2}") if dt.kind == "c" else dt)


def _reciprocal_of_zero(dt) -> str:
    """NumPy's integer reciprocal is ``1.0 / x`` cast back: for 0 that is the CPU's cast of inf."""
    with np.errstate(all="ignore"):
        return literal(np.reciprocal(np.zeros(1, dt))[0], dt)


def _by_kind(**forms):
    """A template choosing its form by the loop dtype's kind (``i``, ``u``, ``f``, ``c``, ...);
    ``other`` for the rest."""

    def template(a, dt):
        form = forms.get(dt.kind, forms.get("other"))
        return form(a, dt)

    return template


def _fsign(a, dt):
    one, zero, x = literal(1, dt), literal(0, dt), a[0]
    return f"({one} if {x} > 0 else (-{one} if {x} < 0 else ({zero} if {x} == 0 else {x})))"


# The CPU target's templates: NumPy's own algorithms where numba's differ (float floor division
# and remainder, integer division by 0 and -1, complex ordering, division and absolute value).
CPU_TEMPLATES = dict(
    TEMPLATES,
    floor_divide=_by_kind(
        i=lambda a, dt: f"_ifloor_divide({a[0]}, {a[1]})",
        u=lambda a, dt: f"_ufloor_divide({a[0]}, {a[1]})",
        f=lambda a, dt: f"_ffloor_divide({a[0]}, {a[1]}, {_one(dt)})",
        other=TEMPLATES["floor_divide"],
    ),
    remainder=_by_kind(
        i=lambda a, dt: f"_iremainder({a[0]}, {a[1]})",
        u=lambda a, dt: f"_uremainder({a[0]}, {a[1]})",
        f=lambda a, dt: f"_fremainder({a[0]}, {a[1]}, {_one(dt)})",
        other=TEMPLATES["remainder"],
    ),
    sign=_by_kind(
        u=lambda a, dt: f"({literal(1, dt)} if {a[0]} > 0 else {literal(0, dt)})",
        f=_fsign,
        c=lambda a, dt: f"_csign({a[0]}, {_one(dt)})",
        other=TEMPLATES["sign"],
    ),
    reciprocal=_by_kind(
        i=lambda a, dt: f"({_reciprocal_of_zero(dt)} if {a[0]} == 0 else _ireciprocal({a[0]}))",
        u=lambda a, dt: f"({_reciprocal_of_zero(dt)} if {a[0]} == 0 else _ireciprocal({a[0]}))",
        c=lambda a, dt: f"_creciprocal({a[0]}, {_one(dt)})",
        other=lambda a, dt: f"({literal(1, dt)} / {a[0]})",
    ),
    power=_by_kind(
        # _ipow works in uint64 (wrapping as NumPy's): back to the loop's type before any other
        # op sees it (a float conversion of -3 as uint64 is 1.8e19)
        i=lambda a, dt: f"{ctor(dt)}(_ipow({a[0]}, {a[1]}, {literal(1, dt)}))",
        u=lambda a, dt: f"{ctor(dt)}(_ipow({a[0]}, {a[1]}, {literal(1, dt)}))",
        other=TEMPLATES["power"],
    ),
    absolute=_by_kind(c=lambda a, dt: f"_cabs({a[0]}, {_one(dt)})", other=TEMPLATES["absolute"]),
    multiply=_by_kind(c=lambda a, dt: f"_cmul({a[0]}, {a[1]})", other=TEMPLATES["multiply"]),
    square=_by_kind(c=lambda a, dt: f"_cmul({a[0]}, {a[0]})", other=TEMPLATES["square"]),
    divide=_by_kind(
        c=lambda a, dt: f"_cdiv({a[0]}, {a[1]}, {_one(dt)})", other=TEMPLATES["divide"]
    ),
)
for _op, _fn in (
    ("maximum", "_cmaximum"),
    ("minimum", "_cminimum"),
    ("fmax", "_cfmax"),
    ("fmin", "_cfmin"),
    ("less", "_clt"),
    ("less_equal", "_cle"),
    ("greater", "_cgt"),
    ("greater_equal", "_cge"),
):
    CPU_TEMPLATES[_op] = _by_kind(
        c=(lambda f: lambda a, dt: f"{f}({a[0]}, {a[1]})")(_fn), other=TEMPLATES[_op]
    )


def _fast_name(op: str, dtype, math: str) -> str | None:
    """The fast-math function computing ``op`` at ``dtype`` (``fastmath.OPS``), or None."""
    fastmath = _fastmath()
    if math != "fast" or np.dtype(dtype).kind != "f" or fastmath is None:
        return None
    name = fastmath.name_for(op, np.dtype(dtype))
    return name if name and name in fastmath.namespace() else None


# What one element of an op adds to a kernel's work, in elements of a kernel of arithmetic
# alone (which streams its operands at about 0.3 ns an element, vectorised, in cache): a
# fast-math function per 4 bytes of its dtype (float32 log 0.36 ns, float64 log 0.7 ns, the
# inverse hyperbolic ones 1-3 ns), a scalar call numba lowers (libm: 10-40 ns, and the loop
# stays scalar) LIBM_COST. Kernels choose threads by this work (``emit_cpu``). A real ``sqrt``
# or ``copysign`` is no call: numba lowers it to one vector instruction, of about a fast-math
# function's cost (counted as LIBM_COST, it sent a float64 column norm of 2.6k elements, 22 us
# on one thread, to two).
LIBM_COST = 32
INSTRUCTION_OPS = frozenset({"sqrt", "copysign"})


def element_cost(node: Node, math: str = "fast") -> int:
    """Extra work of one element of ``node`` beyond plain arithmetic (see ``LIBM_COST``)."""
    from ..ops import OPS

    op = OPS.get(node.op)
    if op is None or op.ufunc is None or op.arithmetic:
        return 0
    if is_fast_math(node, math) or _one_instruction(node):
        return max(1, loop_dtypes(node)[1].itemsize // 4)
    if node.op in CPU_TEMPLATES or node.op in CPU_NODE_TEMPLATES:
        return 0
    return LIBM_COST


def _one_instruction(node: Node) -> bool:
    return node.op in INSTRUCTION_OPS and loop_dtypes(node)[1].kind == "f"


def is_fast_math(node: Node, math: str = "fast") -> bool:
    """Whether ``expr`` computes ``node`` with one of tracekit's fast-math functions."""
    fastmath = _fastmath()
    if math != "fast" or fastmath is None or node.op not in fastmath.OPS:
        return False  # (loop_dtypes needs a ufunc: ask the registry first)
    return _fast_name(node.op, loop_dtypes(node)[1], math) is not None


def _fastmath():
    """The ``fastmath`` module, or None where it cannot be imported (numba's libm calls are
    still correct)."""
    try:
        from . import fastmath
    except Exception:
        return None
    return fastmath


def _full(node, args, dtypes):
    return literal(node.attrs["fill_value"], node.out.dtype)


def _python_op(node, args, dtypes):  # a numba function: called per element
    return f"{pyop_name(node)}({', '.join(args)})"


def _astype(node, args, dtypes):
    return cast(args[0], dtypes[0], node.out.dtype)


def _where(node, args, dtypes):
    out = node.out.dtype
    c = args[0] if np.dtype(dtypes[0]).kind == "b" else f"({args[0]} != 0)"
    return f"({cast(args[1], dtypes[1], out)} if {c} else {cast(args[2], dtypes[2], out)})"


def _clip(node, args, dtypes):
    out = node.out.dtype
    x = cast(args[0], dtypes[0], out)
    fn_max, fn_min = ("_maximum", "_minimum") if out.kind in "fc" else ("max", "min")
    if out.kind == "c":  # NumPy's lexicographic order of complex numbers
        fn_max, fn_min = "_cmaximum", "_cminimum"
    lo, hi = _clip_bounds(node, dtypes[0])
    # ties (-0.0 vs 0.0) go NumPy's way: _maximum/_minimum give b on a tie, as np.maximum;
    # the bound wins, except in the clip ufunc's loop for two scalar bounds (x wins): numbers
    # or 0-d arrays (a bound moving with a loop is a 0-d value: fuzz seed 9900161)
    both = lo is not None and hi is not None and out.kind != "c"
    both = both and all(not isinstance(b, Var) or b.shape == () for b in node.inputs[1:])
    if lo is not None:
        lo = cast(args[1], dtypes[1], out)
        x = f"{fn_max}({lo}, {x})" if both else f"{fn_max}({x}, {lo})"
    if hi is not None:
        hi = cast(args[2], dtypes[2], out)
        x = f"{fn_min}({hi}, {x})" if both else f"{fn_min}({x}, {hi})"
    return x


def _is_real(dtype) -> bool:
    return np.dtype(dtype).kind != "c"


def _real(node, args, dtypes):
    out = node.out.dtype
    return cast(args[0], dtypes[0], out) if _is_real(dtypes[0]) else f"({args[0]}).real"


def _imag(node, args, dtypes):
    return literal(0, node.out.dtype) if _is_real(dtypes[0]) else f"({args[0]}).imag"


def _angle(node, args, dtypes):
    out = node.out.dtype
    deg = " * (180.0 / np.pi)" if node.attrs.get("deg") else ""
    if _is_real(dtypes[0]):  # bool and ints have no .imag in numba
        x = cast(args[0], dtypes[0], np.float64)
        return cast(f"(np.arctan2(0.0, {x}){deg})", np.float64, out)
    return cast(f"(np.arctan2(({args[0]}).imag, ({args[0]}).real){deg})", np.float64, out)


# Lowerings of the elementwise ops whose element is not a formula of its arguments alone (they
# read attributes or input dtypes): ``op -> fn(node, args, dtypes) -> source``, shared by the
# targets; CPU_NODE_TEMPLATES adds what only CPU kernels can do (call a numba python op).
NODE_TEMPLATES = {
    "full": _full,
    "astype": _astype,
    "where": _where,
    "clip": _clip,
    "real": _real,
    "imag": _imag,
    "angle": _angle,
}
CPU_NODE_TEMPLATES = {**NODE_TEMPLATES, "python_op": _python_op}


def expr(
    node: Node,
    args: list,
    dtypes: list,
    math: str = "fast",
    templates=None,
    node_templates=None,
    near: bool = False,
) -> str:
    """Source of one output element of elementwise ``node``; ``args``/``dtypes`` per input.

    ``node_templates`` (default ``CPU_NODE_TEMPLATES``) are asked first, then the fast-math
    functions, then ``templates`` (default ``CPU_TEMPLATES``); a ufunc in none of them is
    numba's ``np.<op>``. ``near``: a fast-math function's version for ordinary arguments
    where it has one (exact where :func:`far_test` gives 0)."""
    templates = CPU_TEMPLATES if templates is None else templates
    lower = (CPU_NODE_TEMPLATES if node_templates is None else node_templates).get(node.op)
    if lower is not None:
        return lower(node, args, dtypes)
    op, out = node.op, node.out.dtype
    loop_in, loop_out = loop_dtypes(node)
    known = _out_of_range_comparison(node, loop_in)
    if known is not None:
        return cast(known, np.bool_, out)
    cargs = [cast(a, d, l) for a, d, l in zip(args, dtypes, loop_in)]
    fast = _fast_name(op, loop_out, math)
    by_literal = FAST_LITERAL_LOWERINGS.get(op) if fast else None
    body = by_literal(node, cargs, loop_out) if by_literal else None
    if body is None and fast:
        versions = _near_names(op, loop_out, math) if near else None
        body = f"{versions[0] if versions else fast}({', '.join(cargs)})"
    if body is None:
        general = templates.get(op)
        body = general(cargs, np.dtype(loop_in[0])) if general else f"np.{op}({', '.join(cargs)})"
    return cast(body, loop_out, out)


def _near_names(op: str, dtype, math: str) -> tuple | None:
    if _fast_name(op, dtype, math) is None:
        return None
    return _fastmath().near_names(op, dtype)


def far_test(node: Node, args: list, dtypes: list, math: str = "fast") -> str | None:
    """Source of 1 where ``expr(..., near=True)`` of ``node`` does not cover its argument
    (a huge sine's), else 0; None where that version is ``expr``'s ordinary one."""
    if CPU_NODE_TEMPLATES.get(node.op) is not None or len(args) != 1:
        return None
    loop_in, loop_out = loop_dtypes(node)
    versions = _near_names(node.op, loop_out, math)
    if versions is None:
        return None
    return f"{versions[1]}({cast(args[0], dtypes[0], loop_in[0])})"


def _constant_exponent(node: Node) -> float | None:
    """``c`` of ``x ** c`` where ``c`` is a real literal that is an integer below 32 or a
    multiple of 1/4 below 16 in magnitude (``fastmath.power_const``'s domain), else None."""
    c = node.inputs[1]
    if isinstance(c, Var) or np.ndim(c) != 0 or np.iscomplexobj(c) or isinstance(c, str):
        return None
    c = float(np.asarray(c).real)
    whole = abs(c) < 32 and c == int(c)
    if not (whole or abs(c) < 16 and 4 * c == int(4 * c)):
        return None
    return c


def _constant_power(x: str, c: float, c_src: str, dtype) -> str:
    """``x ** c`` without exp and log: NumPy's own exact forms for 2, 0.5 and -1 (its power
    loop computes ``x * x``, ``sqrt(x)`` and ``1 / x`` there), else ``fastmath.power_const``
    (a multiplication chain, square roots, a reciprocal; 1 ulp)."""
    if c == 2:
        return f"({x} * {x})"
    if c == 0.5:
        return f"np.sqrt({x})"
    if c == -1:
        return f"({literal(1, dtype)} / {x})"
    return f"{_fastmath().power_const_name(dtype)}({x}, {c_src})"


def _power_by_a_literal(node: Node, args: list, dtype) -> str | None:
    exponent = _constant_exponent(node)
    return None if exponent is None else _constant_power(args[0], exponent, args[1], dtype)


# Fast-math lowerings that read a node's literal inputs, per op: None where the literal does
# not qualify (the op's general fast-math function then computes it).
FAST_LITERAL_LOWERINGS = {"power": _power_by_a_literal}


def _clip_bounds(node: Node, dtype):
    """clip's bounds as NumPy applies them: a Python int bound beyond an integer array's range
    on the side that cannot clip is dropped (``np.clip(uint8_array, -1, None)``)."""
    lo, hi = node.inputs[1], node.inputs[2]
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        if type(lo) is int and lo <= info.min:
            lo = None
        if type(hi) is int and hi >= info.max:
            hi = None
    return lo, hi


def _out_of_range_comparison(node: Node, loop_in) -> str | None:
    """NumPy 2 compares an integer array with a Python int outside its dtype's range exactly
    (``uint8_array < -1`` is all False), where a cast of the literal would wrap: the result is
    known without looking at the array."""
    from ..ops import OPS

    cmp = OPS[node.op].compare
    if cmp is None or np.dtype(loop_in[0]).kind not in "iu":
        return None
    for k, x in enumerate(node.inputs):
        if isinstance(x, int) and not isinstance(x, bool):
            info = np.iinfo(loop_in[k])
            if not info.min <= x <= info.max:
                inside = info.max if x < info.min else info.min  # any value of the dtype
                pair = (inside, x) if k == 1 else (x, inside)
                return "True" if cmp(*pair) else "False"
    return None


def _arith_step(bool_op, op, intrinsic, wrapping):
    def step(a, v, acc, vectorise):
        if acc.kind == "b":
            return f"{a} {bool_op} ({v} != 0)"
        if acc.kind == "f" and vectorise:
            return f"{intrinsic}({a}, {v})"
        return f"{wrapping}({a}, {v})" if acc == _I64 else f"{a} {op} {v}"

    return step


def _extremum_step(name):
    def step(a, v, acc, vectorise):
        if acc.kind != "f":
            return f"{name}({a}, {v})"
        return f"_acc_{name}({a}, {v})" if vectorise else f"_{name}imum({a}, {v})"

    return step


_STEPS = {  # by Reduction.combine
    "add": _arith_step("|", "+", "_acc_add", "_wadd"),
    "multiply": _arith_step("&", "*", "_acc_mul", "_wmul"),
    "or": lambda a, v, acc, vectorise: f"{a} | ({v} != 0)",
    "and": lambda a, v, acc, vectorise: f"{a} & ({v} != 0)",
    "max": _extremum_step("max"),
    "min": _extremum_step("min"),
}


def accumulate(red, a: str, v: str, acc, vectorise: bool = False) -> str:
    """One step of the :class:`~tracekit.ops.Reduction` ``red`` (a reduction's or a scan's),
    ``a <combine> v``, with ``v`` already in the accumulator dtype ``acc``.

    int64 wraps as NumPy's; ``vectorise`` spells float steps with the accumulator intrinsics
    (``_make_kernel_intrinsics``) that let LLVM vectorise the loop (CPU), else plainly (CUDA)."""
    return _STEPS[red.combine](a, v, np.dtype(acc), vectorise)


NATIVE = {np.dtype(t) for t in (np.float64, np.int64, np.bool_, np.complex128)}


def typed_expr(node: Node, src: str, math: str = "fast") -> str:
    """``typed(src, node.out.dtype)``, without the wrapper where numba's own result already has
    that dtype: float32 arithmetic on float32 operands (``Op.arithmetic``: numba widens small
    ints, so those keep their wrapper) and fast-math calls. Every wrapper is a call numba types
    and lowers once per statement: fewer of them compile faster."""
    from ..ops import OPS

    out = node.out.dtype
    if out == np.float32 and (OPS[node.op].arithmetic or is_fast_math(node, math)):
        loop_in, loop_out = loop_dtypes(node)
        if loop_out == out and all(d == out for d in loop_in):
            return src
    return typed(src, out)


def typed(src: str, dtype) -> str:
    """``src`` forced to ``dtype`` (numba widens small ints and mixes; NumPy does not)."""
    return src if np.dtype(dtype) in NATIVE else f"{ctor(dtype)}({src})"
