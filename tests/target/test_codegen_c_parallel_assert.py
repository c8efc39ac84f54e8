"""An assert (or failed workspace allocation) inside a parallel loop on target c: OpenMP forbids
``return`` inside the parallel region, so the first failure is recorded and reported after it.
Oracle: NumPy for valid input, the assert's message for invalid input; llvm cross-checks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kiln
from kiln import tir
from kiln.runtime.error import TVMError


def build_checked_copy(target: str):
    """out[i] = x[i] in a parallel loop that asserts x[i] >= 0 first."""
    n = tir.SizeVar("n", "int32")
    i = tir.Var("i", "int32")
    x = tir.decl_buffer((n,), "float32", name="x")
    out = tir.decl_buffer((n,), "float32", name="out")
    body = tir.AssertStmt(x[i] >= tir.const(0.0, "float32"),
                          tir.StringImm("x must not be negative"),
                          tir.BufferStore(out, x[i], [i]))
    func = tir.PrimFunc([x, out], tir.For(i, 0, n, tir.ForKind.PARALLEL, body))
    return kiln.build(func.with_attr("global_symbol", "checked_copy"),
                      target=target)["checked_copy"]


@pytest.fixture(scope="module", params=["c", "llvm"])
def checked_copy(request):
    return build_checked_copy(request.param)


@pytest.mark.parametrize("n", [1, 7, 100_000])
def test_valid_input_is_copied(checked_copy, n):
    x = np.random.default_rng(n).uniform(0, 1, n).astype("float32")
    out = kiln.nd.empty((n,), "float32")
    checked_copy(kiln.nd.array(x), out)
    np.testing.assert_array_equal(out.numpy(), x)


@pytest.mark.parametrize("bad", [0, 50_000, 99_999])
def test_a_failing_assert_in_any_chunk_raises_its_message(checked_copy, bad):
    x = np.ones(100_000, "float32")
    x[bad] = -1
    out = kiln.nd.empty((100_000,), "float32")
    with pytest.raises(TVMError, match="x must not be negative"):
        checked_copy(kiln.nd.array(x), out)
    x[bad] = 2                                   # the kernel stays usable
    checked_copy(kiln.nd.array(x), out)
    np.testing.assert_array_equal(out.numpy(), x)


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_thread_counts_in_fresh_processes(threads):
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        from kiln.runtime.error import TVMError
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_codegen_c_parallel_assert import build_checked_copy
        f = build_checked_copy("c")
        x = np.ones(4096, "float32"); x[4000] = -3
        out = kiln.nd.empty((4096,), "float32")
        try:
            f(kiln.nd.array(x), out)
        except TVMError as err:
            assert "x must not be negative" in str(err), err
            print("raised")
        x[4000] = 3
        f(kiln.nd.array(x), out)
        assert np.array_equal(out.numpy(), x)
        print("ok")
    """)
    env = dict(os.environ, KILN_NUM_THREADS=str(threads))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["raised", "ok"]
