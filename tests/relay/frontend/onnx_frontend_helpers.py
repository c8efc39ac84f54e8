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


def run_vm(model, inputs: list, shape: dict | None = None) -> list:
    """Convert ``model`` with ``from_onnx`` and run it on the compiled path (``relay.vm.compile``
    at opt_level 3 for llvm, then the VM); returns the VM's result (an NDArray or an ADT)."""
    import kiln
    from kiln import relay
    from kiln.relay.frontend import from_onnx
    from kiln.runtime.vm import VirtualMachine

    mod, params = from_onnx(model, shape=shape)
    with kiln.transform.PassContext(opt_level=3):
        exe = relay.vm.compile(mod, target="llvm", params=params)
    return VirtualMachine(exe, kiln.cpu(0)).invoke("main", *inputs)
