"""A direct interpreter of the graph IR (Myia's debug VM): closures as Python closures,
primitives by their NumPy ``impl``. It runs graphs at any stage (before inference too), which
makes it the tool to check a transformation's meaning apart from compilation.

Entry point: :func:`evaluate`.
"""

from __future__ import annotations

from typing import Any

from kiln.jit import structural as S
from kiln.jit.ir import Apply, Constant, Graph, Node, manage, toposort
from kiln.jit.primitives import Primitive


class Closure:
    """A graph with the values of its enclosing graphs' nodes (the frames it closes over)."""

    __slots__ = ("graph", "frames")

    def __init__(self, graph: Graph, frames: dict):
        self.graph, self.frames = graph, frames

    def __call__(self, *args: Any) -> Any:
        return _run(self.graph, args, self.frames)


def _value(node: Node, env: dict, frames: dict) -> Any:
    if isinstance(node, Constant):
        v = node.value
        return Closure(v, frames) if isinstance(v, Graph) else v
    if node in env:
        return env[node]
    return frames[node]


def _run(graph: Graph, args: tuple, outer: dict) -> Any:
    while True:  # tail calls loop here instead of recursing (loops are tail calls)
        if len(args) != len(graph.parameters):
            raise TypeError(f"{graph.name}() takes {len(graph.parameters)} arguments, "
                            f"got {len(args)}")
        env: dict = dict(zip(graph.parameters, args))
        frames = {**outer, **env}
        out = graph.output
        order = [n for n in toposort(graph, _MANAGERS.setdefault(graph, manage(graph)))
                 if isinstance(n, Apply) and n.graph is graph]
        for n in order:
            frames = {**frames, **env}
            if n is out:
                break
            env[n] = _apply(n, env, frames)
        if not (isinstance(out, Apply) and out.graph is graph):
            return _value(out, env, {**frames, **env})
        frames = {**frames, **env}
        fn = _value(out.inputs[0], env, frames)
        vals = tuple(_value(i, env, frames) for i in out.inputs[1:])
        if isinstance(fn, Closure):
            graph, args, outer = fn.graph, vals, fn.frames
            continue
        return _call(fn, vals)


_MANAGERS: dict = {}


def _call(fn: Any, vals: tuple) -> Any:
    if isinstance(fn, Primitive):
        if fn is S.partial:
            f, *bound = vals
            return lambda *more: _call(f, (*bound, *more))
        return fn.impl(*vals)
    return fn(*vals)


def _apply(n: Apply, env: dict, frames: dict) -> Any:
    fn = _value(n.inputs[0], env, frames)
    return _call(fn, tuple(_value(i, env, frames) for i in n.inputs[1:]))


def evaluate(graph: Graph, *args: Any) -> Any:
    """Run ``graph`` on Python/NumPy values."""
    return _run(graph, args, {})


__all__ = ["evaluate", "Closure"]
