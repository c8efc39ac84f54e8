"""Each op built with the schedule its chosen implementation brings (cpu and arm_cpu keys)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from strategy_testlib import arg_type

import kiln
from kiln import te
from kiln.ir.op import Op
from kiln.relay.op import op_attrs as A
from kiln.relay.op.strategy import select_implementation
from kiln.target import Target

RNG = np.random.default_rng(17)
X4 = RNG.standard_normal((2, 4, 8, 8)).astype("float32")
G4 = RNG.standard_normal(4).astype("float32")


def build_with_chosen_schedule(op_name, attrs, inputs, target):
    out_type = Op.get(op_name).get_attr("FTVMTypeRelation")([arg_type(v) for v in inputs],
                                                            attrs)
    holders = [te.placeholder(v.shape, str(v.dtype), name=f"in{k}")
               for k, v in enumerate(inputs)]
    impl, outs = select_implementation(op_name, attrs, holders, out_type, target)
    sch = impl.schedule(attrs, outs, target)
    mod = kiln.build(sch, holders + outs, target=target, name="op")
    results = [kiln.nd.empty([int(d) for d in t.shape], t.dtype) for t in outs]
    mod["op"](*[kiln.nd.array(v) for v in inputs], *results)
    return impl.name, [r.numpy() for r in results]


CASES = [
    ("nn.max_pool2d", A.MaxPool2DAttrs(pool_size=(3, 3), strides=(2, 2),
                                       padding=(1, 1, 1, 1)), [X4],
     lambda: F.max_pool2d(torch.from_numpy(X4), 3, 2, 1)),
    ("nn.global_avg_pool2d", A.GlobalPool2DAttrs(), [X4],
     lambda: torch.from_numpy(X4).mean((2, 3), True)),
    ("nn.softmax", A.SoftmaxAttrs(axis=1), [X4], lambda: F.softmax(torch.from_numpy(X4), 1)),
    ("nn.layer_norm", A.LayerNormAttrs(axis=1), [X4[:, :, 0, 0], G4, G4],
     lambda: F.layer_norm(torch.from_numpy(X4[:, :, 0, 0]), (4,), torch.from_numpy(G4),
                          torch.from_numpy(G4))),
    ("sum", A.ReduceAttrs(axis=(1, 3)), [X4], lambda: torch.from_numpy(X4).sum((1, 3))),
    ("argsort", A.ArgsortAttrs(axis=-1), [X4],
     lambda: torch.from_numpy(np.argsort(X4, -1, kind="stable").astype("int32"))),
    ("transpose", A.TransposeAttrs(axes=(0, 2, 3, 1)), [X4],
     lambda: torch.from_numpy(X4).permute(0, 2, 3, 1)),
    ("nn.conv2d", A.Conv2DAttrs(padding=(1, 1, 1, 1), groups=4), [X4, RNG.standard_normal(
        (4, 1, 3, 3)).astype("float32")], None),
]


@pytest.mark.parametrize("target", ["llvm", "c -keys=arm_cpu"])
def test_ops_with_their_implementations_schedules(target):
    for op_name, attrs, inputs, oracle in CASES:
        name, (out, *_) = build_with_chosen_schedule(op_name, attrs, inputs, Target(target))
        want = oracle() if oracle is not None else F.conv2d(
            torch.from_numpy(inputs[0]), torch.from_numpy(inputs[1]), padding=1, groups=4)
        np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=f"{op_name} ({name}) on {target}")
