"""Helpers for the ONNX frontend tests: run a converted module on the reference interpreter."""

from __future__ import annotations

import numpy as np


def evaluate_main(mod, *args) -> list[np.ndarray]:
    """Run ``mod["main"]`` on the interpreter (after ToANormalForm, so values shared by several
    consumers are computed once) and return its outputs as a list of arrays."""
    from kiln import relay
    from kiln.relay.backend.interpreter import Interpreter

    mod = relay.transform.ToANormalForm()(mod)
    result = Interpreter(mod).evaluate()(*args)
    if hasattr(result, "numpy"):
        return [result.numpy()]
    return [r.numpy() for r in result]
