"""Scalar expressions for elementwise ops, as source text, for the numba code generators.

``expr(node, args, dtypes, math)`` returns the source of one element of ``node``'s output, given
the source and dtype of each input element. Casts follow NumPy's ufunc loop resolution, so the
generated code computes in exactly the dtypes the interpreter does. The CUDA emitter overrides
entries of ``TEMPLATES`` and ``HELPERS`` where the device differs.
"""

from __future__ import annotations

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
    """Source for a constant ``x`` as a value of ``dtype``."""
    dtype = np.dtype(dtype)
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


def _pytype(x):
    """What NumPy's loop resolution sees for an input: a dtype, or a Python type if weak."""
    if isinstance(x, Var):
        return {"f": float, "c": complex}.get(x.dtype.kind, x.dtype) if x.weak else x.dtype
    if isinstance(x, bool):
        return np.dtype(bool)
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
    "reciprocal": lambda a, dt: f"_ireciprocal({a[0]})" if dt.kind in "iu" else f"(1 / {a[0]})",
    "absolute": lambda a, dt: f"abs({a[0]})",
    "sign": lambda a, dt: f"_csign({a[0]})" if dt.kind == "c" else f"np.sign({a[0]})",
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

# Helpers defined once in every generated module (numba compiles those that are used).
HELPERS = """
@numba.njit(inline="always")
def _maximum(a, b):
    return a if (a >= b or a != a) else b


@numba.njit(inline="always")
def _minimum(a, b):
    return a if (a <= b or a != a) else b


@numba.njit(inline="always")
def _fmax(a, b):
    return a if (a >= b or b != b) else b


@numba.njit(inline="always")
def _fmin(a, b):
    return a if (a <= b or b != b) else b


@numba.njit(inline="always")
def _floor_divide(a, b):
    return np.floor_divide(a, b)


@numba.njit(inline="always")
def _remainder(a, b):
    return np.remainder(a, b)


@numba.njit(inline="always")
def _lshift(a, b):
    return a << b if 0 <= b < 64 else a - a


@numba.njit(inline="always")
def _rshift(a, b):
    if 0 <= b < 64:
        return a >> b
    return a - a - 1 if a < 0 else a - a


@numba.njit
def _ipow(a, b):
    if b < 0:
        return a - a + (1 if a == 1 else (0 if a != -1 else (1 if b % 2 == 0 else -1)))
    r = a - a + 1
    while b:
        if b & 1:
            r = r * a
        a = a * a
        b >>= 1
    return r


@numba.njit(inline="always")
def _ireciprocal(a):
    return a if (a == 1 or a == -1) else a - a


@numba.njit(inline="always")
def _csign(z):
    r = abs(z)
    return z / r if r != 0 else z - z
"""

FAST_MATH_OPS = {
    "exp",
    "expm1",
    "log",
    "log1p",
    "tanh",
    "sin",
    "cos",
    "exp2",
    "log2",
    "log10",
    "sinh",
    "cosh",
    "tan",
    "power",
}


def _fast_name(op: str, dtype, math: str) -> str | None:
    if math != "fast" or op not in FAST_MATH_OPS or np.dtype(dtype).kind != "f":
        return None
    try:
        from . import fastmath
    except Exception:  # fast math unavailable: numba's libm calls are still correct
        return None
    name = fastmath.name_for(op, np.dtype(dtype))
    return name if name and name in fastmath.namespace() else None


def expr(node: Node, args: list, dtypes: list, math: str = "fast", templates=None) -> str:
    """Source of one output element of elementwise ``node``; ``args``/``dtypes`` per input."""
    templates = TEMPLATES if templates is None else templates
    op = node.op
    out = node.out.dtype
    if op == "full":
        return literal(node.attrs["fill_value"], out)
    if op == "astype":
        return cast(args[0], dtypes[0], out)
    if op == "where":
        c = args[0] if np.dtype(dtypes[0]).kind == "b" else f"({args[0]} != 0)"
        return f"({cast(args[1], dtypes[1], out)} if {c} else {cast(args[2], dtypes[2], out)})"
    if op == "clip":
        x = cast(args[0], dtypes[0], out)
        fn_max, fn_min = ("_maximum", "_minimum") if out.kind in "fc" else ("max", "min")
        if node.inputs[1] is not None:
            x = f"{fn_max}({x}, {cast(args[1], dtypes[1], out)})"
        if node.inputs[2] is not None:
            x = f"{fn_min}({cast(args[2], dtypes[2], out)}, {x})"
        return x
    if op == "real":
        return cast(f"({args[0]}).real", out, out)
    if op == "imag":
        return cast(f"({args[0]}).imag", out, out)
    if op == "angle":
        deg = " * (180.0 / np.pi)" if node.attrs.get("deg") else ""
        return cast(f"(np.arctan2(({args[0]}).imag, ({args[0]}).real){deg})", np.float64, out)
    loop_in, loop_out = loop_dtypes(node)
    cargs = [cast(a, d, l) for a, d, l in zip(args, dtypes, loop_in)]
    fast = _fast_name(op, loop_out, math)
    if fast:
        body = f"{fast}({', '.join(cargs)})"
    elif op in templates:
        body = templates[op](cargs, np.dtype(loop_in[0]))
    else:
        body = f"np.{op}({', '.join(cargs)})"
    return cast(body, loop_out, out)


NATIVE = {np.dtype(t) for t in (np.float64, np.int64, np.bool_, np.complex128)}


def typed(src: str, dtype) -> str:
    """``src`` forced to ``dtype`` (numba widens small ints and mixes; NumPy does not)."""
    return src if np.dtype(dtype) in NATIVE else f"{ctor(dtype)}({src})"
