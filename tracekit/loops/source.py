"""Which Python loop of the user's source a recorded line belongs to.

>>> import linecache
>>> lines = ["def f(x):\\n", "    for _ in range(3):\\n", "        x = x + 1\\n", "    return x\\n"]
>>> linecache.cache["<demo>"] = (0, None, lines, "<demo>")
>>> enclosing_loop("<demo>", 3)
('<demo>', 2, 'for _ in range(3):')
>>> enclosing_loop("<demo>", 4) is None
True
"""

from __future__ import annotations

import ast
import linecache

_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp)
_LOOPS += (ast.GeneratorExp,)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_spans: dict = {}  # file -> (its lines, ([(first, last, loop line)], [(first, last)] of functions))


def _loop_spans(file: str) -> list:
    lines = linecache.getlines(file)
    cached = _spans.get(file)
    if cached is not None and cached[0] is lines:
        return cached[1]
    text = "".join(lines)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        tree = None
    spans, functions = [], []
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, _LOOPS):
            # a for statement's iterable is evaluated once, before the loop; a while
            # statement's condition in every iteration
            statement = isinstance(node, ast.For | ast.AsyncFor)
            first = node.body[0].lineno if statement else node.lineno
            spans.append((first, node.end_lineno, node.lineno, _header(node, lines)))
        elif isinstance(node, _FUNCTIONS):
            functions.append((node.lineno, node.end_lineno))
    spans.sort(key=lambda s: s[1] - s[0])  # the innermost loop first
    functions.sort(key=lambda s: s[1] - s[0])
    _spans[file] = (lines, (spans, functions))
    return spans, functions


def enclosing_loop(file: str, line: int):
    """``(file, line of the loop, its first line's text)`` of the innermost loop of ``file``
    whose body holds ``line``; None where no loop does."""
    loops = enclosing_loops(file, line)
    return loops[0] if loops else None


def enclosing_loops(file: str, line: int) -> tuple:
    """Every loop of ``file`` whose body holds ``line``, innermost first, each as
    :func:`enclosing_loop` gives it."""
    spans, functions = _loop_spans(file)
    # a loop around the definition of the function the line is in does not run that line
    fn = next(((a, b) for a, b in functions if a <= line <= b), None)
    return tuple(
        (file, at, header or linecache.getline(file, at).strip())
        for first, last, at, header in spans
        if first <= line <= last and (fn is None or fn[0] <= at <= fn[1])
    )


def _header(node, lines: list) -> str | None:
    """A loop statement's first line as written, without its comment (``for k in range(n):``);
    None for a comprehension."""

    def part(n):
        return " ".join((_segment(lines, n) or ast.unparse(n)).split())

    if isinstance(node, ast.For | ast.AsyncFor):
        return f"for {part(node.target)} in {part(node.iter)}:"
    if isinstance(node, ast.While):
        return f"while {part(node.test)}:"
    return None


def _segment(lines: list, node) -> str | None:
    """The source text of ``node`` (``ast.get_source_segment``, which splits the whole file
    again for every node it is asked about: seconds for a long file's loops)."""
    if getattr(node, "end_lineno", None) is None or node.end_lineno > len(lines):
        return None
    first, last = node.lineno - 1, node.end_lineno - 1
    head = lines[first].encode()  # the column offsets count UTF-8 bytes
    if first == last:
        return head[node.col_offset : node.end_col_offset].decode(errors="replace")
    tail = lines[last].encode()[: node.end_col_offset].decode(errors="replace")
    return (
        head[node.col_offset :].decode(errors="replace") + "".join(lines[first + 1 : last]) + tail
    )


# ---------------------------------------------------------------------- for loops left by break
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)
_exits: dict = {}  # (file, line) -> what break_exit found (its lines, the answer)


def break_exit(file: str, line: int):
    """``(the for statement's line, its target's name, its range's arguments as code)`` where
    ``line`` is the test of ``if <test>: break`` (no ``else``) directly in the body of a
    ``for`` loop (without ``else``); None otherwise. The code is None unless the loop is
    ``for <name> in range(...)`` whose arguments are plain expressions of ints, names the
    loop does not assign, ``len(name)`` and ``name.shape[i]``.

    >>> import linecache
    >>> src = ["def f(x, n):\\n", "    for i in range(1, n + 1):\\n", "        x = x / 2\\n",
    ...        "        if x.max() < 1:\\n", "            break\\n", "    return x\\n"]
    >>> linecache.cache["<brk>"] = (0, None, src, "<brk>")
    >>> break_exit("<brk>", 4)[:2]
    (2, 'i')
    >>> break_exit("<brk>", 3) is None
    True
    """
    lines = linecache.getlines(file)
    cached = _exits.get((file, line))
    if cached is not None and cached[0] is lines:
        return cached[1]
    found = None
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        tree = None
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.For) and not node.orelse:
            found = found or _exit_in(node, line)
    _exits[(file, line)] = (lines, found)
    return found


def _exit_in(loop: ast.For, line: int):
    test = next(
        (
            s
            for s in loop.body
            if isinstance(s, ast.If)
            and s.test.lineno <= line <= s.test.end_lineno
            and not s.orelse
            and len(s.body) == 1
            and isinstance(s.body[0], ast.Break)
        ),
        None,
    )
    call = loop.iter
    if test is None:
        return None
    if not isinstance(loop.target, ast.Name) or not (
        isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
    ):
        return loop.lineno, None, None
    if call.func.id != "range" or call.keywords or not 1 <= len(call.args) <= 3:
        return loop.lineno, None, None
    assigned = {
        t.id
        for s in loop.body
        for n in ast.walk(s)
        for t in ast.walk(n)
        if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store | ast.Del)
    }
    if loop.target.id in assigned or not all(_plain(a, assigned) for a in call.args):
        return loop.lineno, None, None
    args = ast.fix_missing_locations(ast.Expression(ast.Tuple(list(call.args), ast.Load())))
    return loop.lineno, loop.target.id, compile(args, "<range>", "eval")


def _plain(e, assigned: set) -> bool:
    """``e`` is an int, a name the loop does not assign, ``len(name)``, ``name.shape[i]`` or
    arithmetic of those: evaluating it again has no effect and gives the range's value."""
    if isinstance(e, ast.Constant):
        return type(e.value) is int
    if isinstance(e, ast.Name):
        return e.id not in assigned and e.id != "len"
    if isinstance(e, ast.BinOp):
        operands = _plain(e.left, assigned) and _plain(e.right, assigned)
        return isinstance(e.op, _ARITHMETIC) and operands
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.op, ast.USub) and _plain(e.operand, assigned)
    if isinstance(e, ast.Call):
        return (
            isinstance(e.func, ast.Name)
            and e.func.id == "len"
            and len(e.args) == 1
            and not e.keywords
            and isinstance(e.args[0], ast.Name)
            and e.args[0].id not in assigned
        )
    if isinstance(e, ast.Subscript):
        shape = e.value
        return (
            isinstance(e.slice, ast.Constant)
            and type(e.slice.value) is int
            and isinstance(shape, ast.Attribute)
            and shape.attr == "shape"
            and isinstance(shape.value, ast.Name)
            and shape.value.id not in assigned
        )
    return False


def range_position(frame, exit_info):
    """``(the iteration's index in its range, the range's length)`` of the for loop that
    :func:`break_exit` found, in the running ``frame`` (None where its values are not ints)."""
    _, target, code = exit_info
    names = {**frame.f_globals, **frame.f_locals, "len": len}
    try:
        values = eval(code, {"__builtins__": {}}, names)  # plain names and ints (see _plain)
        if not all(type(v) is int for v in values):
            return None
        span = range(*values)
        at = frame.f_locals.get(target)
        if type(at) is not int or at not in span:
            return None
        return span.index(at), len(span)
    except Exception:  # a name the frame does not have now, a len() of a non-sequence
        return None
