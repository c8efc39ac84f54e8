"""How InferType, structural hash/equality and the visitors scale with graph size.

Run: ``python benchmarks/infer_type_scale.py [nodes]`` (default 5000). Prints seconds per
stage; the design target is well under a second for a 5,000-node graph, and near zero for
re-running InferType on an already typed module.
"""

from __future__ import annotations

import sys
import time

import kiln
from kiln import relay
from kiln.ir import structural_equal, structural_hash
from kiln.relay.expr_functor import ExprMutator, post_order_visit
from kiln.relay.op.tensor import add, multiply


def build_chain(nodes: int):
    x = relay.var("x", shape=(1, 64))
    y = relay.var("y", shape=(64,))
    expr = x
    for i in range(nodes):
        expr = add(expr, y) if i % 2 else multiply(expr, x)
    return kiln.IRModule.from_expr(relay.Function([x, y], expr))


def timed(label: str, fn):
    start = time.perf_counter()
    result = fn()
    print(f"{label:<32} {time.perf_counter() - start:8.4f} s")
    return result


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    print(f"chain of {nodes} calls")
    mod = timed("build", lambda: build_chain(nodes))
    typed = timed("InferType (cold)", lambda: relay.transform.InferType()(mod))
    timed("InferType (already typed)", lambda: relay.transform.InferType()(typed))
    main_fn = typed["main"]
    timed("structural_hash", lambda: structural_hash(main_fn))
    other = build_chain(nodes)["main"]
    timed("structural_equal (distinct)", lambda: structural_equal(main_fn, other))
    timed("ExprMutator (identity)", lambda: ExprMutator().visit(main_fn))
    timed("post_order_visit", lambda: post_order_visit(main_fn, lambda node: None))


if __name__ == "__main__":
    main()
