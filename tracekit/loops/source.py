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
