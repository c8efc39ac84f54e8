"""Build Relay ops through their strategies (generic computes) and run them, batched; or run
the same cases as one Relay program on every executor (``run_cases(cases, EXECUTORS)``)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import kiln
from kiln import te, topi
from kiln.ir.op import Op
from kiln.ir.type import TensorType, TupleType
from kiln.relay.op.strategy import select_implementation
from kiln.relay.testing.executors import all_configs


def arg_type(value: Any) -> Any:
    if isinstance(value, list):
        return TupleType([arg_type(v) for v in value])
    return TensorType(value.shape, str(value.dtype))


def lower_case(case_id: int, op_name: str, attrs: Any, inputs: list, target: str = "c"):
    """Placeholders, outputs and the chosen implementation for one call."""
    op = Op.get(op_name)
    out_type = op.get_attr("FTVMTypeRelation")([arg_type(v) for v in inputs], attrs)
    holders, tensors = [], []
    for k, value in enumerate(inputs):
        group = value if isinstance(value, list) else [value]
        made = [te.placeholder(v.shape, str(v.dtype), name=f"c{case_id}_{k}_{j}")
                for j, v in enumerate(group)]
        holders += list(zip(made, group))
        tensors += made  # tuple arguments arrive flattened, as from the TE compiler
    impl, outs = select_implementation(op, attrs, tensors, out_type, kiln.target.Target(target))
    return holders, outs, impl


# run_cases' "target" that runs the cases as Relay calls on every executor instead
EXECUTORS = "executors"


def relay_program(cases: list) -> tuple[kiln.IRModule, list[np.ndarray], list[int]]:
    """The cases as one Relay function: each input a parameter (a tuple input a relay.Tuple
    of parameters), the result a tuple of every case's outputs. Returns the module, the
    parameters' values and each case's number of outputs."""
    from kiln import relay
    from kiln.relay import expr as rx
    from kiln.relay.type_infer import infer_expr

    params, values, fields, counts = [], [], [], []
    for k, (op_name, attrs, inputs) in enumerate(cases):
        args = []
        for j, value in enumerate(inputs):
            group = value if isinstance(value, list) else [value]
            made = [relay.var(f"c{k}_{j}_{i}", shape=np.shape(v), dtype=str(np.asarray(v).dtype))
                    for i, v in enumerate(group)]
            params += made
            values += [np.asarray(v) for v in group]
            args.append(relay.Tuple(made) if isinstance(value, list) else made[0])
        call = rx.Call(Op.get(op_name), args, attrs)
        ty = infer_expr(call)
        outs = ([rx.TupleGetItem(call, i) for i in range(len(ty.fields))]
                if isinstance(ty, TupleType) else [call])
        fields += outs
        counts.append(len(outs))
    mod = kiln.IRModule.from_expr(relay.Function(params, relay.Tuple(fields)))
    return mod, values, counts


# The configurations an op matrix runs on: the graph executor and the VM at opt_level 3 (every
# pass, AlterOpLayout included), the inputs as run-time inputs and as constants (which fold
# away at build time: FoldConstant against the kernels). Each configuration with run-time
# inputs costs a build of the whole group, and for a one-op program the lower levels add
# executor paths that the random programs (tests/relay/test_random_programs.py, all 16
# configurations) already cover; KILN_DIFFERENTIAL=full runs these matrices on all 16 too
# (benchmarks/differential_executors.py).
OP_MATRIX_CONFIGS = all_configs() if os.environ.get("KILN_DIFFERENTIAL") == "full" else \
    all_configs(opt_levels=(3,))


def run_on_executors(cases: list, configs=OP_MATRIX_CONFIGS, tol: float = 1e-5
                     ) -> list[list[np.ndarray]]:
    """The cases' outputs from the interpreter, after checking that each executor
    configuration of ``configs`` gives the same within ``tol`` (all cases in one program: one
    build per configuration for the whole group)."""
    from kiln.relay.testing.executors import check_executors_agree

    mod, values, counts = relay_program(cases)
    flat = check_executors_agree(mod, values, rtol=tol, atol=tol, configs=configs)
    spans, start = [], 0
    for count in counts:
        spans.append(flat[start:start + count])
        start += count
    return spans


def run_cases(cases: list, target: str = "c", tol: float = 1e-5) -> list[list[np.ndarray]]:
    """Every ``(op_name, attrs, inputs)`` computed; outputs per case.

    All cases share one build (one compile). Each output is read through a uniquely named
    copy, since generated wrappers name their arguments after the tensors. With ``target``
    :data:`EXECUTORS` the cases run as Relay calls on every executor (:func:`run_on_executors`).
    """
    if target == EXECUTORS:
        return run_on_executors(cases, tol=tol)
    lowered = [lower_case(k, *case[:3], target=target) for k, case in enumerate(cases)]
    holders = [h for hs, _, _ in lowered for h in hs]
    outs = [te.compute(t.shape, lambda *i, t=t: t(*i), name=f"out{k}_{j}")
            for k, (_, os_, _) in enumerate(lowered) for j, t in enumerate(os_)]
    sch = topi.generic.default_schedule(outs)
    mod = kiln.build(sch, [h for h, _ in holders] + outs, target=target, name="kernel")
    args = [kiln.nd.array(v) for _, v in holders]
    results = [kiln.nd.empty([int(d) for d in t.shape], t.dtype) for t in outs]
    mod["kernel"](*args, *results)
    arrays = [r.numpy() for r in results]
    spans, start = [], 0
    for _, os_, _ in lowered:
        spans.append(arrays[start:start + len(os_)])
        start += len(os_)
    return spans
