"""Build Relay ops through their strategies (generic computes) and run them, batched."""

from __future__ import annotations

from typing import Any

import numpy as np

import kiln
from kiln import te, topi
from kiln.ir.op import Op
from kiln.ir.type import TensorType, TupleType
from kiln.relay.op.strategy import select_implementation


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


def run_cases(cases: list, target: str = "c") -> list[list[np.ndarray]]:
    """Every ``(op_name, attrs, inputs)`` computed; outputs per case.

    All cases share one build (one compile). Each output is read through a uniquely named
    copy, since generated wrappers name their arguments after the tensors.
    """
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
