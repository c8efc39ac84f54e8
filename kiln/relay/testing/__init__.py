"""Model workloads and test helpers with TVM's names (``tvm.relay.testing``).

Entry points: :func:`run_infer_type`, :func:`run_opt_pass`, :func:`create_workload`, and the
workload modules (``mlp``, ``resnet``, ``mobilenet``, ``squeezenet``, ``vgg``, ``dqn``,
``dcgan``, ``synthetic``: ``get_workload(...) -> (mod, params)``), ``layers`` (their layer
helpers), ``nat`` (``make_nat_expr``, ``make_nat_value``, ``count``), ``check_grad``, ``rand``,
``count_ops``, ``to_python`` / ``run_as_python`` (a program as a Python script), and
:mod:`~kiln.relay.testing.executors` (one program on every executor, checked to agree).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln._lazy import attach

_WORKLOADS = ("mlp", "resnet", "mobilenet", "squeezenet", "vgg", "dqn", "dcgan", "synthetic",
              "resnet_3d", "lstm", "densenet", "inception_v3", "layers", "nat", "init")
_HELPERS = {"check_grad": "gradients", "rand": "gradients", "count_ops": "gradients",
            "make_nat_expr": "nat", "make_nat_value": "nat", "count": "nat",
            "to_python": "py_converter", "run_as_python": "py_converter"}
__all__ = ["run_infer_type", "run_opt_pass", "create_workload", "executors", *_WORKLOADS,
           *_HELPERS]

__getattr__, __dir__ = attach(__name__, {
    "executors": "kiln.relay.testing.executors",
    **{name: f"kiln.relay.testing.{name}" for name in _WORKLOADS},
    **{name: (f"kiln.relay.testing.{home}", name) for name, home in _HELPERS.items()}})


def run_opt_pass(expr: Any, opt_pass: Any) -> Any:
    """Run a pass (or a list of passes) on an expression; returns the transformed ``main``
    (or the expression itself when it is not a function)."""
    from kiln.ir.module import IRModule
    from kiln.ir.transform import Sequential
    from kiln.relay import expr as rx
    from kiln.relay.transform import InferType

    passes = list(opt_pass) if isinstance(opt_pass, list | tuple) else [opt_pass]
    mod = IRModule.from_expr(expr)
    mod = Sequential([InferType(), *passes, InferType()])(mod)
    main = mod["main"]
    return main if isinstance(expr, rx.Function) else main.body


def run_infer_type(expr: Any) -> Any:
    """``expr`` with every node's ``checked_type`` filled in."""
    return run_opt_pass(expr, [])


def _annotate_params(func: Any) -> Any:
    """``func`` (typed) with every unannotated parameter annotated by its inferred type.

    TVM's InferType leaves parameters annotated this way; kiln's types them in place, so a
    workload rebuilds its ``main`` once and prints every weight's shape as TVM's does.
    """
    from kiln.relay.expr import Function, Var, bind

    annotated = {p: Var(p.name_hint, p.checked_type) for p in func.params
                 if p.type_annotation is None}
    if not annotated:
        return func
    return Function([annotated.get(p, p) for p in func.params], bind(func.body, annotated),
                    func.checked_type.ret_type, func.type_params, func.attrs)


def create_workload(net: Any, initializer: Any = None, seed: int = 0) -> tuple[Any, dict]:
    """An IRModule of ``net`` plus random parameters for every input but the first ("data").

    ``initializer`` (a :class:`~kiln.relay.testing.init.Initializer`, called as
    ``initializer(name, array)`` after seeding NumPy's global generator with ``seed``, as in
    TVM) replaces the default filling described next.

    Only the data needs a type annotation: InferType derives the weights' types from the
    layers' attrs, and the returned ``main`` carries them as annotations, as in TVM. Weights
    use Xavier-uniform scaling; batch-norm means are 0, variances 1, gammas 1 and betas 0, as
    TVM's initializer does.

    Example
    -------
    >>> from kiln import relay
    >>> x = relay.var("data", shape=(1, 8))
    >>> y = relay.nn.dense(x, relay.var("fc_weight"), units=4)
    >>> mod, params = create_workload(relay.Function([x, *relay.analysis.free_vars(y)[1:]], y))
    >>> mod["main"].params[1].type_annotation
    Tensor[(4, 8), float32]
    """
    from kiln.ir.module import IRModule
    from kiln.relay.transform import InferType
    from kiln.runtime.ndarray import array

    typed = InferType()(IRModule.from_expr(net))
    mod = InferType()(IRModule.from_expr(_annotate_params(typed["main"])))
    rng = np.random.default_rng(seed)
    params = {}
    if initializer is not None:
        np.random.seed(seed)
    for param in mod["main"].params[1:]:
        ty = param.checked_type
        shape, dtype, name = ty.concrete_shape, str(ty.dtype), param.name_hint
        if initializer is not None:
            value = np.zeros(shape, dtype)
            initializer(name, value)
        elif name.endswith(("_gamma", "_moving_var")):
            value = np.ones(shape, dtype)
        elif name.endswith(("_beta", "_moving_mean", "_bias")):
            value = np.zeros(shape, dtype)
        else:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
            fan_out = shape[0]
            bound = np.sqrt(6.0 / (fan_in + fan_out))
            value = rng.uniform(-bound, bound, shape).astype(dtype)
        params[name] = array(value)
    return mod, params
