"""The IR: ``Var``, ``Node``, ``Graph``.

A graph is pure: every node maps input values to new output values; nothing mutates.
Graphs are immutable by convention: passes build new ones.

>>> import numpy as np
>>> x = Var("x", (3,), np.dtype("float64"))
>>> y = Var("1", (3,), np.dtype("float64"))
>>> g = Graph([x], [Node("exp", (x,), {}, (y,))], [y])
>>> print(g)
graph(%x: f64[3]) {
  %1: f64[3] = exp(%x)
  return %1
}
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import math
import os
import sys
from dataclasses import dataclass, field

import numpy as np

_SHORT = {
    "bool": "bool",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "c64",
    "complex128": "c128",
}


def short_dtype(dtype) -> str:
    """``float32`` -> ``f32``."""
    return _SHORT.get(np.dtype(dtype).name, np.dtype(dtype).name)


def type_str(shape, dtype) -> str:
    """``f32[128,64]``; a weak (Python scalar) value gets a ``~``."""
    return f"{short_dtype(dtype)}[{','.join(map(str, shape))}]"


_ids = itertools.count()

# The op table (``tracekit.ops`` fills it and calls it ``OPS``): kept here so that checking a
# graph needs nothing above the IR.
OPS: dict = {}
# Loaders of the objects a graph's JSON holds by reference, by their "type" (``tracekit.pyop``
# registers python ops'): ``register_json_loader``.
_JSON_LOADERS: dict = {}


def register_json_loader(kind: str, load):
    """``load(d)`` rebuilds the objects whose JSON form ``d`` has ``d["type"] == kind``."""
    _JSON_LOADERS[kind] = load


_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYabcdefghijklmnopqrstuvwxyz0123456789")
_ESCAPES = {"Z": "ZZ", "_": "Zu", ".": "Zd"}


def ident(name: str) -> str:
    """The identifier generated code uses for the value named ``name``.

    ``v`` and the name with every character other than an ASCII letter or digit escaped
    (``Z`` -> ``ZZ``, ``_`` -> ``Zu``, ``.`` -> ``Zd``, any other -> ``Zx`` and six hex digits).
    The escapes make it injective: distinct names never share an identifier, so a parameter
    ``v1`` (``vv1``) and the value ``%1`` (``v1``) stay apart. It has no ``_``, so backends can
    build their names as ``<role>_<ident>_<suffix>`` (``k0_r_v12_i``) and still tell every pair
    of values apart; it starts with ``v``, so it is never a keyword, a module or a helper
    (``vars``, the one builtin of that form, is escaped with ``Zk``).

    >>> ident("1"), ident("v1"), ident("self_w"), ident("self.w")
    ('v1', 'vv1', 'vselfZuw', 'vselfZdw')
    """
    if not name:
        raise ValueError("a value needs a non-empty name")
    body = "".join(c if c in _PLAIN else _ESCAPES.get(c) or f"Zx{ord(c):06x}" for c in name)
    return "vZkars" if body == "ars" else "v" + body


_INT = frozenset({int})
_INT_SHAPES: dict = {}  # shapes of Vars made so far, each an (equal) tuple of ints
_DTYPE_CLASSES: set = set()  # the classes of the np.dtype instances met (isinstance is slow)


def _int_shape(shape) -> tuple:
    """``shape`` as a tuple of ints, remembered in ``_INT_SHAPES``."""
    if type(shape) is not tuple or not _INT.issuperset(map(type, shape)):
        shape = tuple(int(d) for d in shape)
    if len(_INT_SHAPES) > 10_000:
        _INT_SHAPES.clear()
    _INT_SHAPES[shape] = shape
    return shape


def _as_dtype(dtype) -> np.dtype:
    if isinstance(dtype, np.dtype):
        _DTYPE_CLASSES.add(type(dtype))
        return dtype
    return np.dtype(dtype)


class Var:
    """A value in the graph: name, shape, dtype. Immutable; compared by identity.

    ``weak`` marks a Python scalar input (NEP 50: it takes the dtype of the array it meets).

    >>> import numpy as np, tracekit as tk
    >>> v = tk.Var("x", (2, 3), np.float32)
    >>> v, v.name, v.shape, v.dtype
    (%x: f32[2,3], 'x', (2, 3), dtype('float32'))
    """

    __slots__ = ("name", "shape", "dtype", "weak", "_uid")

    def __init__(self, name: str, shape, dtype, weak: bool = False):
        try:  # tracing makes a Var per op: a shape seen before is not checked again
            shape = _INT_SHAPES[shape]
        except (KeyError, TypeError):
            shape = _int_shape(shape)
        _set_name(self, name if type(name) is str else str(name))
        _set_shape(self, shape)
        _set_dtype(self, dtype if type(dtype) in _DTYPE_CLASSES else _as_dtype(dtype))
        _set_weak(self, weak is True or bool(weak))
        _set_uid(self, next(_ids))

    def __setattr__(self, k, v):
        raise AttributeError("Var is immutable")

    def __reduce__(self):  # pickled (to dask workers): one Var per pickle, as identity needs
        return Var, (self.name, self.shape, self.dtype, self.weak)

    @property
    def ndim(self) -> int:
        """Number of dimensions.

        >>> import numpy as np, tracekit as tk
        >>> tk.Var("x", (2, 3), np.float32).ndim
        2
        """
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements.

        >>> import numpy as np, tracekit as tk
        >>> tk.Var("x", (2, 3), np.float32).size
        6
        """
        return math.prod(self.shape)  # (NumPy's prod took 4 us: the planner asks often)

    @property
    def type(self) -> str:
        """Shape and dtype as the listing prints them (``~``: a weak Python scalar).

        >>> import numpy as np, tracekit as tk
        >>> tk.Var("x", (2, 3), np.float32).type, tk.Var("s", (), np.float64, weak=True).type
        ('f32[2,3]', 'f64[]~')
        """
        return type_str(self.shape, self.dtype) + ("~" if self.weak else "")

    @property
    def ident(self) -> str:
        """This value's identifier in generated code: :func:`ident` of its name.

        >>> import numpy as np, tracekit as tk
        >>> tk.Var("x", (3,), np.float64).ident
        'vx'
        """
        return ident(self.name)

    def __repr__(self):
        return f"%{self.name}: {self.type}"


# the slots' own setters: a Var is immutable (its __setattr__ raises), set once in __init__
_set_name, _set_shape, _set_dtype, _set_weak, _set_uid = (
    getattr(Var, slot).__set__ for slot in Var.__slots__
)


def _notebook_cell(file: str) -> int | None:
    """The execution count of the notebook cell IPython compiled as ``file`` (what its
    tracebacks call ``In[3]``), or None outside IPython."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    cells = getattr(getattr(shell, "compile", None), "_filename_map", None)
    return cells.get(file) if isinstance(cells, dict) else None


@dataclass(frozen=True)
class Source:
    """Where a node came from in the user's code."""

    file: str
    line: int
    function: str
    text: str = ""

    def __str__(self):
        cell = _notebook_cell(self.file)
        if cell is not None:
            return f"In [{cell}], line {self.line}"
        return f"{self.short_file}:{self.line}"

    @property
    def short_file(self) -> str:
        """The file's name; a notebook cell (``ipykernel_<pid>/<hash>.py``) is ``cell``."""
        parent = os.path.basename(os.path.dirname(self.file))
        if parent.startswith("ipykernel_") or self.file.startswith("<ipython-input-"):
            return "cell"
        return os.path.basename(self.file)


@dataclass(frozen=True)
class Affine:
    """An integer of an index that moves by ``step`` every iteration: ``base + step * k`` in
    iteration ``k`` of its loop (``a[i, i]`` in ``for i in range(n)``: jax's dynamic_slice).

    A loop counts its iterations from its ``start`` attribute (0 unless it runs a segment of
    another loop's iterations: a checkpointed gradient's); a ``local`` one counts them from 0
    whatever the start (the row of a stack the loop itself made, ``j``).

    >>> Affine(3, 1), at_iteration((Affine(3, 1), slice(Affine(0, 2), None)), 4)
    (3+k, (7, slice(8, None, None)))
    >>> at_iteration((Affine(3, 1), Affine(9, -1, local=True)), 4, start=10)
    (17, 5)
    >>> at_iteration(Affine(3, 1), 4, start=Affine(0, 8))  # a start moving with an outer loop
    7+8*k
    """

    base: int
    step: int
    local: bool = False

    def at(self, k: int) -> int:
        return self.base + self.step * k

    def __repr__(self):
        i = "j" if self.local else "k"
        scaled = i if self.step == 1 else f"-{i}" if self.step == -1 else f"{self.step}*{i}"
        if not self.base:
            return scaled
        return f"{self.base}{'' if scaled.startswith('-') else '+'}{scaled}"

    def __tracekit_json__(self):
        local = {"local": True} if self.local else {}
        return {"type": "affine", "base": self.base, "step": self.step, **local}


def shifted(x: Affine, k: int, start) -> int | Affine:
    """Affine ``x`` in iteration ``k`` of a loop whose count starts at ``start`` (an int, or
    an :class:`Affine` of the loop around it: then an Affine of that loop's count)."""
    if x.local:
        return x.at(k)
    if isinstance(start, Affine):
        step = x.step * start.step
        base = x.at(start.base + k)
        return Affine(base, step) if step else base
    return x.at(start + k)


def at_iteration(x, k: int, start=0):
    """``x`` (an attribute value) with every :class:`Affine` in it taken at iteration ``k`` of
    a loop whose count starts at ``start``."""
    if isinstance(x, Affine):
        return shifted(x, k, start)
    if isinstance(x, tuple):
        return tuple(at_iteration(e, k, start) for e in x)
    if isinstance(x, slice):
        return slice(*(at_iteration(e, k, start) for e in (x.start, x.stop, x.step)))
    if isinstance(x, dict):
        return {key: at_iteration(v, k, start) for key, v in x.items()}
    return x


def moves(x) -> bool:
    """Whether attribute value ``x`` holds an :class:`Affine`."""
    if isinstance(x, Affine):
        return True
    if isinstance(x, dict):
        x = x.values()
    elif isinstance(x, slice):
        x = (x.start, x.stop, x.step)
    elif not isinstance(x, tuple | list):
        return False
    leaves = _LEAVES
    for e in x:  # a loop, not any(): every traced op asks this of its attributes
        c = e.__class__
        if c in leaves:
            continue
        if c is slice:  # an index's slices: their ends, without a call each
            if (
                e.start.__class__ in leaves
                and e.stop.__class__ in leaves
                and e.step.__class__ in leaves
            ):
                continue
        if moves(e):
            return True
    return False


_LEAVES = frozenset({int, float, bool, str, type(None), np.dtype})


class FrozenDict(dict):
    """An immutable, hashable mapping for node attributes."""

    def _blocked(self, *a, **k):
        raise TypeError("node attributes are immutable")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = _blocked

    def __reduce__(self):  # unpickling a dict subclass would set items one by one
        return FrozenDict, (dict(self),)

    def __hash__(self):
        return hash(json.dumps(_canonical(dict(self)), sort_keys=True))


@dataclass(frozen=True, eq=False, init=False, slots=True)
class Node:
    """One op application: ``outputs = op(*inputs, **attrs)``.

    Inputs are Vars or literal constants (Python/NumPy scalars, small arrays, None).

    >>> import numpy as np, tracekit as tk
    >>> t = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3))
    >>> n = t.graph.nodes[1]
    >>> n.op, n.inputs, dict(n.attrs), n.outputs
    ('add', (%0: f64[3], 1.0), {}, (%1: f64[3],))
    """

    op: str
    inputs: tuple
    attrs: FrozenDict
    outputs: tuple
    source: Source | None = None
    scope: tuple = ()

    def __init__(self, op, inputs, attrs, outputs, source=None, scope=()):
        # written out (dataclass's would set each field, then convert): tracing makes a node
        # per op, tens of thousands in a loop
        _set_op(self, op)
        _set_inputs(self, inputs if type(inputs) is tuple else tuple(inputs))
        _set_attrs(self, attrs if type(attrs) is FrozenDict else FrozenDict(attrs))
        _set_outputs(self, outputs if type(outputs) is tuple else tuple(outputs))
        _set_source(self, source)
        _set_scope(self, scope if type(scope) is tuple else tuple(scope))

    @property
    def out(self) -> Var:
        """The first (usually the only) output.

        >>> import numpy as np, tracekit as tk
        >>> tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph.nodes[0].out
        %0: f64[3]
        """
        return self.outputs[0]

    @property
    def var_inputs(self) -> list[Var]:
        """The inputs that are values of the graph (not literal constants).

        >>> import numpy as np, tracekit as tk
        >>> tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph.nodes[1].var_inputs
        [%0: f64[3]]
        """
        return [v for v in self.inputs if isinstance(v, Var)]

    def replace(self, **changes) -> Node:
        """A copy with some fields changed (nodes are immutable).

        >>> import numpy as np, tracekit as tk
        >>> n = tk.trace(lambda x: np.exp(x), np.ones(3)).graph.nodes[0]
        >>> n.replace(op="log").op, n.op
        ('log', 'exp')
        """
        fields = dict(
            op=self.op,
            inputs=self.inputs,
            attrs=self.attrs,
            outputs=self.outputs,
            source=self.source,
            scope=self.scope,
        )
        fields.update(changes)
        return Node(**fields)

    def __str__(self):
        return format_node(self)


# the slots' own setters (frozen: a Node's fields are set once, in __init__)
_set_op, _set_inputs, _set_attrs, _set_outputs, _set_source, _set_scope = (
    getattr(Node, field).__set__
    for field in ("op", "inputs", "attrs", "outputs", "source", "scope")
)


@dataclass(frozen=True)
class InputSpec:
    """What a graph input is: a function argument, a captured array or a constant."""

    kind: str  # "arg" | "capture" | "const"
    label: str  # "x", "self.w1", "closure:scale", "const"


# Python's rules for operators on Python numbers that a graph computes otherwise, each a guard
# ``how``: the condition (a bool the graph computes) must be what it was when traced.
PYTHON_RULES = {
    "nonzero": "Python raises ZeroDivisionError for a zero divisor (and 0 to a negative power)",
    "pow_type": "the type of a power of Python numbers depends on the values (an int to a "
    "negative power is a float, a negative float to a fractional power complex)",
    "int64": "a Python int must fit int64 in the graph",
    "bounds": "NumPy raises OverflowError for a Python int out of an integer array's bounds",
    "shift": "Python raises ValueError for a negative shift count",
}


@dataclass(frozen=True)
class Guard:
    """A value that tracing read and baked into the graph (control flow, float(), .item()), or
    the view-or-copy choice NumPy made for a reshape of an input that a write then depended on
    (``how="layout"``, checked on the arguments: ``traced.check_layout_guards``), or one of
    Python's rules that a Python number computed in the graph followed when traced (``how`` a
    key of ``PYTHON_RULES``, ``value`` the bool the rule's condition had)."""

    var: Var
    value: object
    how: str  # "bool", "int", "float", "item", "tolist", "index", ..., "layout", PYTHON_RULES
    source: Source | None = None

    def __str__(self):
        where = f"  # {self.source}" if self.source else ""
        if self.how == "layout":  # value: (the reshape was a view, [(view op, attrs), ...])
            steps = ".".join(
                f"{op}({', '.join(f'{k}={v!r}' for k, v in attrs.items())})"
                for op, attrs in self.value[1]
            )
            made = "a view" if self.value[0] else "a copy"
            return f"guard layout(%{self.var.name}): {steps} is {made}{where}"
        return f"guard {self.how}(%{self.var.name}) == {self.value!r}{where}"


@dataclass(eq=False)
class Graph:
    """Inputs, nodes in topological order, outputs, plus what tracing learnt.

    ``writebacks`` pairs (output position, input position): the callable copies that output
    into that input after a run (in-place writes into inputs). ``constants`` holds the values
    of ``const`` inputs. ``guards`` lists the values tracing baked in.

    >>> import numpy as np, tracekit as tk
    >>> g = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph
    >>> g.inputs, [n.op for n in g.nodes], g.outputs
    ([%x: f64[3]], ['exp', 'add'], [%1: f64[3]])
    """

    inputs: list
    nodes: list
    outputs: list
    specs: list = None
    constants: dict = field(default_factory=dict)
    guards: list = field(default_factory=list)
    writebacks: list = field(default_factory=list)
    name: str = "graph"

    def __post_init__(self):
        self.inputs, self.nodes, self.outputs = (
            list(self.inputs),
            list(self.nodes),
            list(self.outputs),
        )
        if self.specs is None:
            self.specs = [InputSpec("arg", v.name) for v in self.inputs]
        self.specs = list(self.specs)

    # ------------------------------------------------------------------ queries
    def producers(self) -> dict:
        """Var -> the node that produces it.

        >>> import numpy as np, tracekit as tk
        >>> g = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph
        >>> g.producers()[g.outputs[0]].op
        'add'
        """
        return {o: n for n in self.nodes for o in n.outputs}

    def users(self) -> dict:
        """Var -> list of nodes that read it.

        >>> import numpy as np, tracekit as tk
        >>> g = tk.trace(lambda x: np.exp(x) * x, np.ones(3)).graph
        >>> [n.op for n in g.users()[g.inputs[0]]]
        ['exp', 'multiply']
        """
        use = {}
        for n in self.nodes:
            for v in n.var_inputs:
                use.setdefault(v, []).append(n)
        return use

    @property
    def n_results(self) -> int:
        """Outputs that are the function's results (the rest are write-backs).

        >>> import numpy as np, tracekit as tk
        >>> def f(x, acc):
        ...     acc += x  # a write into an input: one more output, written back
        ...     return x * 2
        >>> g = tk.trace(f, np.ones(3), np.zeros(3)).graph
        >>> g.n_results, len(g.outputs), g.writebacks
        (1, 2, [(1, 1)])
        """
        return len(self.outputs) - len(self.writebacks)

    def replace(self, **changes) -> Graph:
        """A new graph with some fields changed (the others shared with this one).

        >>> import numpy as np, tracekit as tk
        >>> g = tk.trace(lambda x: np.exp(x), np.ones(3)).graph
        >>> g.replace(name="f").name, g.name
        ('f', '<lambda>')
        """
        fields = dict(
            inputs=self.inputs,
            nodes=self.nodes,
            outputs=self.outputs,
            specs=self.specs,
            constants=self.constants,
            guards=self.guards,
            writebacks=self.writebacks,
            name=self.name,
        )
        fields.update(changes)
        return Graph(**fields)

    # ------------------------------------------------------------------ checks
    def check(self) -> Graph:
        """Validate: every Var defined once before use, known ops, outputs defined.

        Raises ``ValueError`` naming the first problem; returns the graph.

        >>> import numpy as np, tracekit as tk
        >>> g = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph
        >>> g.check() is g
        True
        >>> g.replace(nodes=g.nodes[1:]).check()  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: %0 used before it is defined in: %1: f64[3] = add(%0, 1.0)  # ...
        """
        defined, names = set(), set()
        for v in self.inputs:
            if v in defined:
                raise ValueError(f"input %{v.name} appears twice")
            if v.name in names:
                raise ValueError(f"two inputs are named %{v.name}")
            defined.add(v)
            names.add(v.name)
        if len(self.specs) != len(self.inputs):
            raise ValueError("specs and inputs differ in length")
        for v, s in zip(self.inputs, self.specs):
            if s.kind == "const" and v not in self.constants:
                raise ValueError(f"const input %{v.name} has no value")
        for n in self.nodes:
            if n.op not in OPS:
                raise ValueError(f"unknown op {n.op!r} in: {n}")
            if OPS[n.op].check is not None:  # a loop: its body, and how the node matches it
                OPS[n.op].check(n)
            for v in n.var_inputs:
                if v not in defined:
                    raise ValueError(f"%{v.name} used before it is defined in: {n}")
            for o in n.outputs:
                if o in defined:
                    raise ValueError(f"%{o.name} defined twice, again in: {n}")
                if o.name in names:  # names identify values in JSON and in generated code
                    raise ValueError(f"two values are named %{o.name}, again in: {n}")
                defined.add(o)
                names.add(o.name)
        for o in self.outputs:
            if o not in defined:
                raise ValueError(f"output %{o.name} is not defined")
        for g in self.guards:
            if g.var not in defined:
                raise ValueError(f"guard on undefined %{g.var.name}")
        for oi, ii in self.writebacks:
            if not (0 <= oi < len(self.outputs) and 0 <= ii < len(self.inputs)):
                raise ValueError(f"bad writeback {(oi, ii)}")
        return self

    # ------------------------------------------------------------------ identity
    def key(self) -> str:
        """Structural hash: equal for equal computations, ignoring names, sources, scopes.

        >>> import numpy as np, tracekit as tk
        >>> a = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph
        >>> b = tk.trace(lambda y: np.exp(y) + 1.0, np.zeros(3)).graph
        >>> c = tk.trace(lambda y: np.exp(y) + 2.0, np.zeros(3)).graph
        >>> a.key() == b.key(), a.key() == c.key(), len(a.key())
        (True, False, 64)
        """
        return hashlib.sha256(json.dumps(self._structure(), sort_keys=True).encode()).hexdigest()

    def _structure(self):
        num = {v: i for i, v in enumerate(self.inputs)}

        def ref(x):
            return ["v", num[x]] if isinstance(x, Var) else ["c", _canonical(x)]

        nodes = []
        for n in self.nodes:
            attrs = _canonical(
                dict(n.attrs), lambda v: {"var": num[v]}, lambda body: {"body": body._structure()}
            )
            nodes.append([n.op, [ref(x) for x in n.inputs], attrs])
            for o in n.outputs:
                num[o] = len(num)
        ins = [[v.shape, v.dtype.str, v.weak, s.kind] for v, s in zip(self.inputs, self.specs)]
        consts = {
            str(num[v]): hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
            for v, a in self.constants.items()
        }
        outs_types = [[o.shape, o.dtype.str] for n in self.nodes for o in n.outputs]
        return {
            "inputs": ins,
            "nodes": nodes,
            "types": outs_types,
            "outputs": [num[o] for o in self.outputs],
            "consts": consts,
            "guards": [[num[g.var], g.how, _canonical(g.value)] for g in self.guards],
            "writebacks": [list(w) for w in self.writebacks],
        }

    # ------------------------------------------------------------------ text
    def __str__(self):
        return format_graph(self)

    __repr__ = __str__

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> str:
        """Serialise to a JSON string; :meth:`from_json` restores an equal graph.

        >>> import json, numpy as np, tracekit as tk
        >>> text = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph.to_json()
        >>> json.loads(text)["format"]
        'tracekit-graph-1'
        """
        return json.dumps(_graph_to_obj(self))

    @classmethod
    def from_json(cls, text: str) -> Graph:
        """The graph ``to_json`` wrote; ``ValueError`` if ``text`` is not one. Its recorded types
        are checked against its ops (:func:`check_types`) before it is compiled.

        Python ops are loaded by reference (their module is imported), as pickle does: load
        graphs you trust.

        >>> import numpy as np, tracekit as tk
        >>> g = tk.trace(lambda x: np.exp(x) + 1.0, np.ones(3)).graph
        >>> g2 = tk.Graph.from_json(g.to_json())
        >>> g2.key() == g.key(), [n.op for n in g2.nodes]
        (True, ['exp', 'add'])
        >>> tk.Graph.from_json("{")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Graph.from_json: not JSON text (...)
        """
        try:
            d = json.loads(text)
        except (TypeError, ValueError) as e:
            raise ValueError(f"Graph.from_json: not JSON text ({e})") from e
        if not isinstance(d, dict):
            raise ValueError(f"Graph.from_json: expected a JSON object, got {type(d).__name__}")
        try:
            graph = _graph_from_obj(d)
        except (KeyError, TypeError, IndexError, AttributeError) as e:
            raise ValueError(f"Graph.from_json: malformed graph ({type(e).__name__}: {e})") from e
        graph.from_json_unchecked = True  # compiling checks the types first
        return graph


# ---------------------------------------------------------------------- text listing
def fmt_value(x) -> str:
    if isinstance(x, Var):
        return f"%{x.name}"
    if isinstance(x, np.ndarray):
        if x.size <= 8:
            return f"{short_dtype(x.dtype)}{x.tolist()!r}"
        return f"<{x.dtype}{list(x.shape)}>"
    if isinstance(x, np.generic):
        return f"{short_dtype(x.dtype)}({x.item()!r})"
    if isinstance(x, np.dtype):
        return x.name
    if isinstance(x, slice):
        return fmt_slice(x)
    if isinstance(x, tuple):
        return "(" + ", ".join(fmt_value(e) for e in x) + ("," if len(x) == 1 else "") + ")"
    if x is Ellipsis:
        return "..."
    if callable(x) and hasattr(x, "__name__"):
        return x.__name__
    return repr(x)


def fmt_slice(s: slice) -> str:
    a = "" if s.start is None else str(s.start)
    b = "" if s.stop is None else str(s.stop)
    return f"{a}:{b}" + ("" if s.step is None else f":{s.step}")


def format_node(n: Node, comment: bool = True) -> str:
    outs = ", ".join(f"%{o.name}: {o.type}" for o in n.outputs)
    args = [fmt_value(x) for x in n.inputs]
    shown = {k: v for k, v in n.attrs.items() if v is not None and not isinstance(v, Graph)}
    args += [f"{k}={fmt_value(v)}" for k, v in shown.items()]
    line = f"{outs} = {n.op}({', '.join(args)})"
    if comment:
        where = []
        if n.source:
            where.append(str(n.source))
        if n.scope:
            where.append(f"({' > '.join(n.scope)})")
        if where:
            line += "  # " + " ".join(where)
    return line


def format_bodies(n: Node) -> list[str]:
    """The lines of the graphs a node holds (a loop's body), under its header."""
    lines = []
    for body in (a for a in n.attrs.values() if isinstance(a, Graph)):
        ins = ", ".join(f"%{v.name}: {v.type}" for v in body.inputs)
        lines.append(f"{body.name}:  # ({ins})")
        lines += _node_lines(body)
        lines.append("  next " + ", ".join(f"%{o.name}" for o in body.outputs))
    return lines


def _node_lines(g: Graph) -> list[str]:
    """The listing of ``g``'s nodes (with the bodies they hold) and guards, indented once."""
    lines = []
    for n in g.nodes:
        lines.append("  " + format_node(n))
        lines += ["    " + line for line in format_bodies(n)]
    return lines + ["  " + str(gd) for gd in g.guards]


def format_graph(g: Graph) -> str:
    ins = [f"%{v.name}: {v.type}" for v, s in zip(g.inputs, g.specs) if s.kind == "arg"]
    lines = [f"{g.name}({', '.join(ins)}) {{"]
    for v, s in zip(g.inputs, g.specs):
        if s.kind != "arg":
            lines.append(f"  {s.kind} %{v.name}: {v.type} = {s.label}")
    lines += _node_lines(g)
    res = [f"%{o.name}" for o in g.outputs[: g.n_results]]
    lines.append("  return " + ", ".join(res))
    for oi, ii in g.writebacks:
        lines.append(f"  write %{g.outputs[oi].name} -> %{g.inputs[ii].name}")
    lines.append("}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- canonical values / JSON
def _canonical(x, var=lambda v: {"var": v.name}, graph=None):
    """A JSON-able, order-stable form of an attribute or constant value; ``var`` gives a Var's
    (by name in JSON, by position in ``Graph.key``), ``graph`` a loop body's (its JSON form, or
    its structure in ``Graph.key``)."""
    if isinstance(x, Var):
        return var(x)
    if isinstance(x, Graph):
        return graph(x) if graph is not None else {"graph": _graph_to_obj(x)}
    if isinstance(x, bool | type(None) | str):
        return x
    if isinstance(x, np.generic):  # before float/complex: np.float64 subclasses float
        return {"np": np.dtype(x.dtype).str, "v": _canonical(x.item(), var, graph)}
    if isinstance(x, int):
        return {"int": x}
    if isinstance(x, float):
        return {"float": repr(x)}
    if isinstance(x, complex):
        return {"complex": [repr(x.real), repr(x.imag)]}
    if isinstance(x, np.dtype):
        return {"dtype": x.str}
    if isinstance(x, type) and issubclass(x, np.generic):
        return {"dtype": np.dtype(x).str}
    if isinstance(x, np.ndarray):
        return {
            "array": np.dtype(x.dtype).str,
            "shape": list(x.shape),
            "b64": base64.b64encode(np.ascontiguousarray(x).tobytes()).decode(),
        }
    if isinstance(x, slice):
        return {"slice": [_canonical(e, var, graph) for e in (x.start, x.stop, x.step)]}
    if x is Ellipsis:
        return {"ellipsis": True}
    if isinstance(x, tuple):
        return {"tuple": [_canonical(e, var, graph) for e in x]}
    if isinstance(x, list):
        return {"list": [_canonical(e, var, graph) for e in x]}
    if isinstance(x, dict):
        return {"dict": [[k, _canonical(v, var, graph)] for k, v in sorted(x.items())]}
    if hasattr(x, "__tracekit_json__"):
        return {"object": x.__tracekit_json__()}
    raise TypeError(f"cannot serialise attribute value {x!r} of type {type(x).__name__}")


def _uncanonical(x):
    if not isinstance(x, dict):
        return x
    (k, *_), v = list(x.keys()), x
    if k == "int":
        return int(v["int"])
    if k == "float":
        return float(v["float"])
    if k == "complex":
        return complex(float(v["complex"][0]), float(v["complex"][1]))
    if k == "np":
        return np.dtype(v["np"]).type(_uncanonical(v["v"]))
    if k == "dtype":
        return np.dtype(v["dtype"])
    if k == "array":
        raw = base64.b64decode(v["b64"])
        return np.frombuffer(raw, dtype=np.dtype(v["array"])).reshape(v["shape"]).copy()
    if k == "slice":
        return slice(*(_uncanonical(e) for e in v["slice"]))
    if k == "ellipsis":
        return Ellipsis
    if k == "tuple":
        return tuple(_uncanonical(e) for e in v["tuple"])
    if k == "list":
        return [_uncanonical(e) for e in v["list"]]
    if k == "dict":
        return {kk: _uncanonical(e) for kk, e in v["dict"]}
    if k == "graph":
        return _graph_from_obj(v["graph"])
    if k == "object":
        d = v["object"]
        load = _JSON_LOADERS.get(d.get("type")) if isinstance(d, dict) else None
        if load is None:
            raise ValueError(f"unknown object in graph JSON: {d!r}")
        return load(d)
    raise ValueError(f"bad JSON value {x!r}")


def _var_obj(v: Var):
    return {"name": v.name, "shape": list(v.shape), "dtype": v.dtype.str, "weak": v.weak}


def _source_obj(s: Source | None):
    return None if s is None else [s.file, s.line, s.function, s.text]


def _graph_to_obj(g: Graph):
    def ref(x):
        return {"var": x.name} if isinstance(x, Var) else {"const": _canonical(x)}

    return {
        "format": "tracekit-graph-1",
        "name": g.name,
        "inputs": [_var_obj(v) for v in g.inputs],
        "specs": [[s.kind, s.label] for s in g.specs],
        "constants": {v.name: _canonical(a) for v, a in g.constants.items()},
        "nodes": [
            {
                "op": n.op,
                "inputs": [ref(x) for x in n.inputs],
                "attrs": {k: _canonical(a) for k, a in n.attrs.items()},
                "outputs": [_var_obj(o) for o in n.outputs],
                "source": _source_obj(n.source),
                "scope": list(n.scope),
            }
            for n in g.nodes
        ],
        "outputs": [o.name for o in g.outputs],
        "guards": [
            [gd.var.name, _canonical(gd.value), gd.how, _source_obj(gd.source)] for gd in g.guards
        ],
        "writebacks": [list(w) for w in g.writebacks],
    }


def check_types(g: Graph) -> Graph:
    """Raise ``ValueError`` unless every shape is valid and every node's outputs have the shape
    and dtype its op gives on inputs of the recorded types (python ops are taken at their word).

    The op's type rule (``OPS[name].type_rule``, :mod:`tracekit.type_rules`) says what it gives:
    nothing runs. A constant input is passed as its value (an index array's values decide a
    shape).
    """
    for v in list(g.inputs) + [o for n in g.nodes for o in n.outputs]:
        if any(d < 0 for d in v.shape) or v.dtype.kind not in "biufcU":
            raise ValueError(f"%{v.name} has an invalid type {v.type}")
    for v, a in g.constants.items():
        if np.shape(a) != v.shape or np.asarray(a).dtype != v.dtype:
            raise ValueError(f"constant %{v.name} is declared {v.type} but holds {np.shape(a)}")

    for n in g.nodes:
        op = OPS[n.op]
        if op.kind == "opaque":  # user code: taken at its word
            continue
        ins = [g.constants.get(x, x) if isinstance(x, Var) else x for x in n.inputs]
        try:
            out = op.type_rule(ins, dict(n.attrs))
        except Exception as e:
            raise ValueError(
                f"{format_node(n, False)}: {n.op} fails on inputs of these types "
                f"({type(e).__name__}: {e})"
            ) from e
        if len(out) != len(n.outputs):
            raise ValueError(
                f"{format_node(n, False)}: {n.op} gives {len(out)} outputs here, not the "
                f"recorded {len(n.outputs)}"
            )
        for o, (shape, dtype) in zip(n.outputs, out):
            if shape != o.shape or dtype != o.dtype:
                raise ValueError(
                    f"{format_node(n, False)}: {n.op} gives {type_str(shape, dtype)} here, not "
                    f"the recorded {o.type}"
                )
    return g


def _graph_from_obj(d) -> Graph:
    if d.get("format") != "tracekit-graph-1":
        raise ValueError("not a tracekit graph (missing format tag 'tracekit-graph-1')")
    env = {}

    def mk(o):
        v = Var(o["name"], o["shape"], np.dtype(o["dtype"]), o.get("weak", False))
        env[v.name] = v
        return v

    def src(s):
        return None if s is None else Source(*s)

    inputs = [mk(o) for o in d["inputs"]]
    nodes = []
    for n in d["nodes"]:
        ins = tuple(env[x["var"]] if "var" in x else _uncanonical(x["const"]) for x in n["inputs"])
        attrs = {k: _uncanonical(a) for k, a in n["attrs"].items()}
        outs = tuple(mk(o) for o in n["outputs"])
        nodes.append(Node(n["op"], ins, attrs, outs, src(n["source"]), tuple(n["scope"])))
    return Graph(
        inputs=inputs,
        nodes=nodes,
        outputs=[env[o] for o in d["outputs"]],
        specs=[InputSpec(k, l) for k, l in d["specs"]],
        constants={env[k]: _uncanonical(a) for k, a in d["constants"].items()},
        guards=[Guard(env[v], _uncanonical(val), how, src(s)) for v, val, how, s in d["guards"]],
        writebacks=[tuple(w) for w in d["writebacks"]],
        name=d.get("name", "graph"),
    ).check()
