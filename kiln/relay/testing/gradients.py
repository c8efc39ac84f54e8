"""Numerical gradient checking of Relay functions (TVM's ``relay.testing.check_grad``), and
``rand`` / ``count_ops``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["check_grad", "rand", "count_ops"]


def rand(dtype: str, *shape: int) -> Any:
    """An NDArray of uniform [0, 1) values."""
    from kiln.runtime.ndarray import array

    return array(np.random.rand(*shape).astype(dtype))


def count_ops(expr: Any) -> dict[str, int]:
    """How many times each operator is called in ``expr``."""
    from kiln.ir.op import Op
    from kiln.relay.expr import Call
    from kiln.relay.expr_functor import post_order_visit

    counts: Counter[str] = Counter()

    def visit(node: Any) -> None:
        if isinstance(node, Call) and isinstance(node.op, Op):
            counts[node.op.name] += 1

    post_order_visit(expr, visit)
    return dict(counts)


def check_grad(func: Any, inputs: Sequence[np.ndarray] | None = None,
               test_inputs: Sequence[np.ndarray] | None = None, eps: float = 1e-6,
               atol: float = 1e-5, rtol: float = 1e-3, scale: float | None = None,
               mean: float = 0, mode: str = "higher_order",
               target_devices: Sequence[tuple[str, Any]] | None = None,
               executor_kind: str = "debug") -> None:
    """Compare ``relay.transform.gradient(func)`` with two-sided finite differences of ``func``.

    The numerical gradient of input ``x`` at index ``i`` is
    ``sum(f(x + eps e_i) - f(x - eps e_i)) / (2 eps)``; inputs default to normal samples of
    standard deviation ``scale`` (10 * eps) so float32 keeps the differences meaningful.
    """
    from kiln.relay.build_module import create_executor
    from kiln.relay.testing import run_infer_type
    from kiln.relay.transform import gradient
    from kiln.testing import enabled_targets

    fwd = run_infer_type(func)
    bwd = run_infer_type(gradient(fwd, mode=mode))
    scale = 10 * eps if scale is None else scale
    if inputs is None:
        inputs = []
        for param in fwd.params:
            ty = param.checked_type
            sample = mean + scale * np.random.randn(*(int(d) for d in ty.shape))
            inputs.append(np.asarray(sample).astype(str(ty.dtype)))
    inputs = list(inputs)
    test_inputs = inputs if test_inputs is None else list(test_inputs)
    # Gradients are matched to test inputs by identity, as TVM's helper does.
    tested = [next(i for i, x in enumerate(inputs) if x is t) for t in test_inputs]
    if not tested:
        raise ValueError("You must test at least one gradient.")
    for target, dev in target_devices or enabled_targets():
        run_bwd = create_executor(executor_kind, device=dev, target=target).evaluate(bwd)
        run_fwd = create_executor(executor_kind, device=dev, target=target).evaluate(fwd)
        _, grads = run_bwd(*inputs)
        grads = [np.asarray(grads[i].numpy(), "float64") for i in tested]
        for grad, x in zip(grads, test_inputs, strict=True):
            approx = np.zeros(x.shape)
            for i in np.ndindex(*x.shape):
                original = x[i]
                x[i] = original + eps
                plus = run_fwd(*inputs).numpy().astype("float64")
                x[i] = original - eps
                minus = run_fwd(*inputs).numpy().astype("float64")
                x[i] = original
                approx[i] = np.sum((plus - minus) / (2 * eps))
            np.testing.assert_allclose(grad, approx, atol=atol, rtol=rtol)
