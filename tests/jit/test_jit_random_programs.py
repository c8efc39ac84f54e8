"""Random small programs (arithmetic, if/else, for loops, closures) compiled by kiln.jit must
agree with CPython running the same source (hypothesis generates the source text)."""

from __future__ import annotations

import importlib.util
import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.jit import myia, standard_pipeline

FINALVM = standard_pipeline.configure({"compile.backend": "finalvm"})
_counter = itertools.count()


@st.composite
def expressions(draw, names, depth=2):
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            return draw(st.sampled_from(names))
        return repr(draw(st.sampled_from([0, 1, 2, 3, -1, 0.5, 1.5])))
    op = draw(st.sampled_from(["+", "-", "*"]))
    return (f"({draw(expressions(names, depth - 1))} {op} "
            f"{draw(expressions(names, depth - 1))})")


@st.composite
def statements(draw, names, depth=2):
    kind = draw(st.sampled_from(["assign", "if", "for", "closure"] if depth else ["assign"]))
    target = draw(st.sampled_from(names))
    if kind == "assign":
        return [f"{target} = {draw(expressions(names))}"]
    if kind == "if":
        cmp = draw(st.sampled_from(["<", ">", "<=", "=="]))
        cond = f"{draw(expressions(names, 1))} {cmp} {draw(expressions(names, 1))}"
        body = draw(statements(names, depth - 1))
        orelse = draw(statements(names, depth - 1))
        return ([f"if {cond}:"] + ["    " + s for s in body] + ["else:"]
                + ["    " + s for s in orelse])
    if kind == "for":
        n = draw(st.integers(0, 4))
        body = draw(statements(names + ["i"], depth - 1))
        return [f"for i in range({n}):"] + ["    " + s for s in body]
    # a closure over the current variables, called twice
    e = draw(expressions(names + ["y"], 1))
    return ["def h(y):", f"    return {e}", f"{target} = h({target}) + h(1)"]


@st.composite
def programs(draw):
    names = ["a", "b"]
    body = []
    for _ in range(draw(st.integers(1, 3))):
        body += draw(statements(names))
    ret = draw(expressions(names, 1))
    return "def f(a, b):\n" + "".join(f"    {s}\n" for s in body) + f"    return {ret}\n"


def load(source: str, tmp_path):
    path = tmp_path / f"prog_{next(_counter)}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def same(x, y) -> bool:
    return x == y or (isinstance(x, float) and isinstance(y, float)
                      and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(source=programs(), a=st.integers(-3, 3), b=st.sampled_from([-1.5, 0.0, 2.0, 3]))
def test_random_programs_agree_with_python(source, a, b, tmp_path):
    f = load(source, tmp_path)
    want = f(a, b)
    for compiled in (myia(f), myia(f, pipeline=FINALVM)):
        got = compiled(a, b)
        assert same(got, want), f"{source}\nf({a}, {b}) = {got!r}, Python: {want!r}"


def test_generator_makes_loops_branches_and_closures():
    from hypothesis import find
    for needle in ("for i in range", "if ", "def h"):
        src = find(programs(), lambda s, n=needle: n in s)
        assert needle in src
