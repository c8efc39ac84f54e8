"""kiln.jit end to end: compiled functions against plain Python/NumPy, grad against JAX and
finite differences, FinalVM limits, the Pipeline object and JitError messages."""

from __future__ import annotations

import time

import jax
import numpy as np
import pytest

import kiln
from kiln.jit import JitError, grad, myia, standard_pipeline, value_and_grad

RNG = np.random.default_rng(0)


def check(fn, *args, rtol=1e-5):
    """``myia(fn)(*args)`` equals ``fn(*args)`` run by CPython (the oracle)."""
    got = myia(fn)(*args)
    want = fn(*args)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol)
    return got


# -- control flow against Python -----------------------------------------------------------------

def branches(x, y):
    if x > y:
        z = x - y
    elif x == y:
        z = 0.0
    else:
        z = y * 2.0
    return z + 1.0


def loops(n):
    acc = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        if i > 20:
            break
        acc += i * i
    j = 10
    while j > 0:
        acc = acc - j
        j -= 3
    return acc


def fact(n):
    if n <= 1:
        return 1
    return n * fact(n - 1)


def closures(x):
    def scale(k):
        return lambda v: v * k + x
    twice = scale(2.0)
    def apply(f, v):
        return f(f(v))
    a, b = apply(twice, x), (x, 3.0)
    return a + b[1] if x > 0 else a - b[1]


def boolean_ops(x, y):
    return (x > 0 and y > 0) or not (x < -5)


@pytest.mark.parametrize("args", [(3.0, 1.0), (2.0, 2.0), (1.0, 4.0)])
def test_if_elif_else(args):
    check(branches, *args)


@pytest.mark.parametrize("n", [0, 7, 40])
def test_for_while_break_continue(n):
    check(loops, n)


def test_recursion_and_closures():
    check(fact, 12)
    check(closures, 1.5)
    check(closures, -2.0)
    for args in [(1.0, 2.0), (-1.0, 2.0), (-9.0, -1.0)]:
        assert myia(boolean_ops)(*args) == boolean_ops(*args)


def test_arrays_against_numpy():
    def f(x, w, b):
        h = np.tanh(x @ w + b)
        s = h.sum(axis=1, keepdims=True) * 0.5 + h.T.mean()
        return s.reshape(-1) + np.exp(-x[:, 0] ** 2) - np.maximum(h, 0.1)[:, 1]

    x = RNG.standard_normal((4, 3)).astype("float32")
    w = RNG.standard_normal((3, 5)).astype("float32")
    b = RNG.standard_normal(5).astype("float32")
    check(f, x, w, b)


def test_constant_bound_loops_unroll_unless_they_branch_on_data():
    def layers(x):
        for _ in range(4):
            x = np.tanh(x) * 2.0
        return x

    def newton(a, x):
        for _ in range(30):
            nx = 0.5 * (x + a / x)
            if np.max(np.abs(nx - x)) < 1e-9:
                break
            x = nx
        return x

    x = RNG.standard_normal(3)
    unrolled = myia(layers)
    np.testing.assert_allclose(unrolled(x), layers(x), rtol=1e-12)
    assert "tailcall" not in unrolled.compile(x).show("link")  # straight-line code
    a = np.array([2.0, 9.0, 17.0])
    loop = myia(newton)
    np.testing.assert_allclose(loop(a, np.ones(3)), newton(a, np.ones(3)), rtol=1e-12)
    assert loop.compile(a, np.ones(3)).show("link").count("GraphRunner") <= 3


def test_debug_linear_impl_matches_relay_and_numpy():
    def f(x, n, y):
        for _ in range(n):
            x = np.tanh(x) * 2.0
        if y > 0.0:
            x = x.T @ x
        return x.sum(axis=0) + y

    x = RNG.standard_normal((3, 2)).astype("float32")
    debug = myia(f, linear_impl="debug")(x, 3, 1.5)
    np.testing.assert_allclose(debug, f(x, 3, 1.5), rtol=1e-5)
    np.testing.assert_allclose(myia(f)(x, 3, 1.5), debug, rtol=1e-5)


def test_one_compiled_version_per_signature():
    f = myia(branches)
    f(1.0, 2.0)
    f(3.0, 1.0)
    f(np.float32(1.0), np.float32(2.0))
    assert len(f.cache) == 2


def test_kiln_jit_is_the_decorator():
    @kiln.jit
    def f(x):
        return x + 1

    assert f(2) == 3


# -- FinalVM limits ------------------------------------------------------------------------------

def count(n):
    i = 0
    acc = 0
    while i < n:
        acc += i
        i += 1
    return acc


def down(n, acc):
    if n == 0:
        return acc
    return down(n - 1, acc + 1)


FINALVM = standard_pipeline.configure({"compile.backend": "finalvm"})


def test_finalvm_tail_calls_run_in_constant_stack():
    loop, rec = myia(count, pipeline=FINALVM), myia(down, pipeline=FINALVM)
    assert loop.backend(10) == "finalvm"
    sizes = []
    for n in (100, 20_000):
        assert loop(n) == sum(range(n)) and rec(n, 0) == n
        sizes.append((loop.cache[loop.signature(n)].vm.stack_size,
                      rec.cache[rec.signature(n, 0)].vm.stack_size))
    assert sizes[0] == sizes[1]  # 200x more iterations, the same stack


def test_million_iteration_loop_and_deep_tail_recursion():
    # the default backend for scalar programs: generated Python, tail calls as a loop
    loop, rec = myia(count), myia(down)
    assert loop.backend(10) == "python"
    assert loop(1_000_000) == sum(range(1_000_000))
    assert rec(100_000, 0) == 100_000


def test_python_and_finalvm_backends_agree():
    for fn, args in [(loops, (30,)), (fact, (10,)), (closures, (1.5,)), (branches, (1.0, 2.0))]:
        assert myia(fn, pipeline=FINALVM)(*args) == myia(fn)(*args) == fn(*args)


def test_relay_vm_backend_runs_whole_programs():
    def layers(x, w, n):
        for _ in range(n):
            x = np.tanh(x @ w)
        return x.sum()

    def pick(x):
        def g(y):
            return x * y
        h = g if x > 0 else (lambda y: y - x)
        return h(3.0) + g(1.0)

    x = RNG.standard_normal((2, 3)).astype("float32")
    w = RNG.standard_normal((3, 3)).astype("float32")
    vm = myia(layers, backend="vm")
    np.testing.assert_allclose(vm(x, w, 3), layers(x, w, 3), rtol=1e-5)
    assert vm.backend(x, w, 3) == "vm" and myia(layers).backend(x, w, 3) == "finalvm"
    assert "def @main" in vm.compile(x, w, 3).show("compile")
    for args in [(fact, (6,)), (pick, (2.0,)), (pick, (-2.0,))]:
        fn, a = args
        assert myia(fn, backend="vm")(*a) == fn(*a)
    with pytest.raises(JitError, match="assert"):
        myia(has_assert, backend="vm")(1.0)


def has_assert(x):
    assert x > 0
    return x


# -- errors --------------------------------------------------------------------------------------

def has_print(x):
    print(x)
    return x


def has_try(x):
    try:
        return x
    except ValueError:
        return 0


def mutates(x):
    x[0] = 1.0
    return x


def unknown(x):
    return x + not_defined_anywhere  # noqa: F821


def gen(x):
    yield x


@pytest.mark.parametrize("fn,arg,words", [
    (has_print, 1.0, "print"), (has_try, 1.0, "try/except"),
    (mutates, np.zeros(3), "mutates an array"), (unknown, 1.0, "not_defined_anywhere"),
    (gen, 1.0, "generators"),
])
def test_unsupported_constructs_name_construct_and_line(fn, arg, words):
    with pytest.raises(JitError, match=words) as err:
        myia(fn)(arg)
    assert "test_jit.py:" in str(err.value)
    assert isinstance(err.value, kiln.TVMError)


def test_shape_error_names_op_and_line():
    def bad(a, b):
        return a @ b

    with pytest.raises(JitError, match=r"matmul: shapes \(2, 3\) and \(2, 3\) not aligned") \
            as err:
        myia(bad)(np.zeros((2, 3), "float32"), np.zeros((2, 3), "float32"))
    assert "return a @ b" in str(err.value)


def test_assert_raises_at_runtime():
    def f(x):
        assert x > 0, "x must be positive"
        return x

    assert myia(f)(2.0) == 2.0
    with pytest.raises(AssertionError, match="positive"):
        myia(f)(-1.0)


# -- grad ----------------------------------------------------------------------------------------

jnp = jax.numpy


@pytest.fixture(autouse=True, scope="module")
def jax_float64():
    """JAX defaults to float32; the oracle must compute in float64 like kiln.jit does. Set
    for this module only: the flag is process-wide and other test modules share workers."""
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


def finite_diff(f, x, eps=1e-6):
    return (f(x + eps) - f(x - eps)) / (2 * eps)


def test_same_segment_in_two_functions_is_built_once(monkeypatch):
    from kiln import relay

    builds = []
    real_build = relay.build
    monkeypatch.setattr(relay, "build", lambda *a, **k: builds.append(1) or real_build(*a, **k))

    def first(x, y):
        return np.tanh(x * 1.2345 + y)

    def second(a, b):  # other names, same computation
        return np.tanh(a * 1.2345 + b)

    x, y = RNG.standard_normal((3, 7)), RNG.standard_normal((3, 7))
    np.testing.assert_allclose(myia(first)(x, y), np.tanh(x * 1.2345 + y), rtol=1e-12)
    np.testing.assert_allclose(myia(second)(y, x), np.tanh(y * 1.2345 + x), rtol=1e-12)
    assert len(builds) == 1
    myia(first)(x.astype("float32"), y.astype("float32"))  # another signature: another build
    assert len(builds) == 2


def test_unrolled_loop_over_rows_shares_one_indexing_kernel():
    # xs[t] with a constant t reads t from an executor input: one take kernel for all t
    def rows(xs, w):
        acc = xs[0] @ w
        for t in range(1, xs.shape[0]):
            acc = acc + np.tanh(xs[t] @ w)
        return acc + xs[-1] @ w

    xs, w = RNG.standard_normal((6, 2, 3)), RNG.standard_normal((3, 4))
    want = rows(xs, w)
    fn = myia(rows)
    np.testing.assert_allclose(fn(xs, w), want, rtol=1e-12)
    np.testing.assert_allclose(myia(rows, linear_impl="debug")(xs, w), want, rtol=1e-12)
    vm = fn.cache[fn.signature(xs, w)].vm
    kernels = {op.func_name for ins in vm.code if hasattr(ins[1], "module")
               for op in ins[1].module.module.op_execs}
    assert len([k for k in kernels if "take" in k or "slice" in k]) == 1, kernels


def test_grad_mlp_against_jax():
    def loss(W1, b1, W2, b2, x, y, np=np):
        h = np.tanh(x @ W1 + b1)
        return np.mean((h @ W2 + b2 - y) ** 2)

    def mlp_loss(W1, b1, W2, b2, x, y):
        h = np.tanh(x @ W1 + b1)
        return np.mean((h @ W2 + b2 - y) ** 2)

    args = [RNG.standard_normal(s).astype("float32")
            for s in [(8, 6), (6,), (6, 3), (3,), (5, 8), (5, 3)]]
    step = kiln.jit(grad(mlp_loss, argnums=(0, 1, 2, 3)))
    got = step(*args)
    want = jax.grad(lambda *a: loss(*a, np=jnp), argnums=(0, 1, 2, 3))(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-4, atol=1e-5)
    # x @ W, h.T @ g and g @ W2.T read their operands in place: no transpose kernel runs
    vm = step.cache[step.signature(*args)].vm
    kernels = [op.func_name for ins in vm.code if hasattr(ins[1], "module")
               for op in ins[1].module.module.op_execs]
    assert kernels and not [k for k in kernels if "transpose" in k], kernels


def piecewise(x):
    if x > 0:
        return x * x * x
    return -2.0 * x


def power_loop(x, n):
    acc = 1.0
    for _ in range(n):
        acc = acc * x
    return acc


def closure_grad(x):
    def g(y):
        return x * y
    return g(x) + g(3.0)


def rec_grad(x, n):
    if n == 0:
        return x
    return np.sin(rec_grad(x, n - 1)) * x


@pytest.mark.parametrize("fn,args", [(piecewise, (1.5,)), (piecewise, (-1.5,)),
                                     (power_loop, (1.3, 4)), (closure_grad, (2.0,)),
                                     (rec_grad, (0.7, 3))])
def test_grad_control_flow_against_finite_differences(fn, args):
    got = grad(fn)(*args)
    want = finite_diff(lambda v: fn(v, *args[1:]), args[0])
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_grad_through_loop_against_jax():
    def f(x, n):
        acc = x
        for _ in range(n):
            acc = jnp.tanh(acc) * x if isinstance(acc, jax.Array) else np.tanh(acc) * x
        return acc

    def mine(x, n):
        acc = x
        for _ in range(n):
            acc = np.tanh(acc) * x
        return acc

    np.testing.assert_allclose(grad(mine)(0.8, 5), jax.grad(f)(0.8, 5), rtol=1e-6)


def test_grad_rnn_with_run_time_index_against_jax():
    def rnn(W, U, h, xs):
        for t in range(xs.shape[0]):
            h = np.tanh(h @ W + xs[t] @ U)
        return np.sum(h)

    def jrnn(W, U, h, xs):
        for t in range(xs.shape[0]):
            h = jnp.tanh(h @ W + xs[t] @ U)
        return jnp.sum(h)

    W, U = RNG.standard_normal((6, 6)) * 0.3, RNG.standard_normal((3, 6)) * 0.3
    h, xs = np.zeros((2, 6)), RNG.standard_normal((5, 2, 3))
    np.testing.assert_allclose(myia(rnn)(W, U, h, xs), rnn(W, U, h, xs), rtol=1e-12)
    for g, w in zip(grad(rnn, argnums=(0, 1))(W, U, h, xs),
                    jax.grad(jrnn, argnums=(0, 1))(W, U, h, xs)):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-9)


def test_grad_through_tuple_unpacking():
    def f(x):
        a, b = x * 2.0, x + 1.0
        return a * b

    np.testing.assert_allclose(grad(f)(3.0), finite_diff(f, 3.0), rtol=1e-6)


def test_value_and_grad_and_has_aux():
    def f(x, y):
        return x * x * y, x + y

    (value, aux), dx = value_and_grad(f, has_aux=True)(3.0, 2.0)
    assert (value, aux, dx) == (18.0, 5.0, 12.0)
    g, aux = grad(f, argnums=1, has_aux=True)(3.0, 2.0)
    assert (g, aux) == (9.0, 5.0)


def test_seed_example_grad_of_array_map():
    from kiln.jit import array_map, array_reduce, asscalar, scalar_add

    def f1(x, y):
        def f(xs, ys):
            return array_map(scalar_add, xs, ys)
        return asscalar(array_reduce(scalar_add, f(x, y), ()))

    @myia
    def main(x, y):
        return grad(f1)(x, y)

    np.testing.assert_array_equal(main(np.ones((2, 3)), np.ones((2, 3))), np.ones((2, 3)))


def test_grad_of_grad_for_scalar_functions_against_jax():
    def cube(x):
        return x * x * x + np.sin(x)

    def jcube(x):
        return x * x * x + jnp.sin(x)

    np.testing.assert_allclose(grad(grad(cube))(0.7), jax.grad(jax.grad(jcube))(0.7),
                               rtol=1e-9)
    # through if, a loop and a closure (Myia never got these working)
    assert grad(grad(piecewise))(2.0) == 12.0 and grad(grad(piecewise))(-2.0) == 0.0
    np.testing.assert_allclose(grad(grad(power_loop))(1.5, 4), 12 * 1.5 ** 2)

    def clo(x):
        def g(y):
            return x * y * y
        return g(x) + g(3.0)

    np.testing.assert_allclose(grad(grad(clo))(2.0), 12.0)


def test_third_order_grad_against_jax():
    # derivative rules are copied per use and keep their constant indices under J, so
    # grad(grad(grad(f))) types (it failed on a tuple index that lost its value)
    def f(x):
        return np.sin(x) * x * x + np.tanh(x)

    def jf(x):
        return jnp.sin(x) * x * x + jnp.tanh(x)

    np.testing.assert_allclose(grad(grad(grad(f)))(0.7),
                               jax.grad(jax.grad(jax.grad(jf)))(0.7), rtol=1e-9)


def test_fourth_order_grad_compiles_in_seconds_and_matches_jax():
    # grad of a gradient differentiates its inlined, folded form (kiln.jit.grad.flatten):
    # differentiating the J closures themselves multiplied the program ~25x per order
    def f(x):
        return np.sin(x) * x * x + np.tanh(x)

    def jf(x):
        return jnp.sin(x) * x * x + jnp.tanh(x)

    g4 = grad(grad(grad(grad(f))))
    t0 = time.perf_counter()
    got = g4(0.7)
    assert time.perf_counter() - t0 < 60  # was > 10 min; ~3 s on a loaded 2-core box
    np.testing.assert_allclose(got, jax.grad(jax.grad(jax.grad(jax.grad(jf))))(0.7), rtol=1e-9)
    np.testing.assert_allclose(g4(-1.3), jax.grad(jax.grad(jax.grad(jax.grad(jf))))(-1.3),
                               rtol=1e-9)


def test_second_order_grad_of_an_array_function_matches_jax():
    # grad of grad through arrays: reductions, broadcasting and matmul under flatten + J
    def f(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    def jf(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    def df(w, x):
        return np.sum(grad(f)(w, x) * w)

    def jdf(w, x):
        return jnp.sum(jax.grad(jf)(w, x) * w)

    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    np.testing.assert_allclose(grad(df)(w, x), jax.grad(jdf)(w, x), rtol=1e-9)


def test_grad_of_non_scalar_or_integer_output_raises():
    def vector(x):
        return x * 2.0

    def integer(n):
        return n * 2

    with pytest.raises(JitError, match=r"vector\(\) must return a scalar"):
        grad(vector)(np.ones(3))
    with pytest.raises(JitError, match="integer"):
        grad(integer)(3)


def test_grad_argnums_out_of_range():
    with pytest.raises(JitError, match="argnums"):
        grad(piecewise, argnums=3)(1.0)


# -- the Pipeline object -------------------------------------------------------------------------

def test_pipeline_steps_slices_configuration_and_listings():
    assert standard_pipeline.steps == [
        "parse", "resolve", "infer", "specialize", "opt", "cconv", "validate",
        "wrap_primitives", "compile", "link", "export", "wrap"]
    front = standard_pipeline["parse":"infer"]
    assert front.steps == ["parse", "resolve", "infer"]
    res = front.run(input=branches, argspec=myia(branches).signature(1.0, 2.0))
    assert "float64" in res.show("infer")
    assert "switch(" in res.show("parse")
    debug = standard_pipeline.configure({"compile.linear_impl": "debug"})
    assert debug.config["compile"] == {"linear_impl": "debug"}
    with pytest.raises(JitError, match="no option"):
        standard_pipeline.configure({"compile.nope": 1})
    listing = myia(loops).compile(5).show("link")
    assert "tailcall" in listing and "switch" in listing and "external" in listing
