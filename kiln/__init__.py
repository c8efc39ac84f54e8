"""kiln: a small, hackable deep-learning compiler with Apache TVM's Relay-era API.

``import kiln as tvm`` gives TVM's top-level names; subpackages load on first use.
"""

from __future__ import annotations

from kiln._lazy import attach
from kiln.runtime.object import register_node_type_modules

__version__ = "0.1.0"

_LAZY = {
    # subpackages
    "runtime": "kiln.runtime",
    "nd": "kiln.runtime.ndarray",
    "ndarray": "kiln.runtime.ndarray",
    "ir": "kiln.ir",
    "transform": "kiln.ir.transform",
    "instrument": "kiln.ir.instrument",
    "relay": "kiln.relay",
    "parser": "kiln.relay.parser",
    "te": "kiln.te",
    "tir": "kiln.tir",
    "arith": "kiln.arith",
    "topi": "kiln.topi",
    "target": "kiln.target",
    "contrib": "kiln.contrib",
    "testing": "kiln.testing",
    "micro": "kiln.micro",
    "rpc": "kiln.rpc",
    "autotvm": "kiln.autotvm",
    "jit": "kiln.jit",
    "driver": "kiln.driver",
    "error": "kiln.runtime.error",
    "_ffi": "kiln._ffi",
    "compat": "kiln.compat",
    # runtime names
    "Object": ("kiln.runtime.object", "Object"),
    "register_object": ("kiln.runtime.object", "register_object"),
    "TVMError": ("kiln.runtime.error", "TVMError"),
    "KilnError": ("kiln.runtime.error", "KilnError"),
    "DataType": ("kiln.runtime.dtype", "DataType"),
    "Device": ("kiln.runtime.device", "Device"),
    "device": ("kiln.runtime.device", "device"),
    "cpu": ("kiln.runtime.device", "cpu"),
    "cuda": ("kiln.runtime.device", "cuda"),
    "opencl": ("kiln.runtime.device", "opencl"),
    "ext_dev": ("kiln.runtime.device", "ext_dev"),
    "vulkan": ("kiln.runtime.device", "vulkan"),
    "metal": ("kiln.runtime.device", "metal"),
    "save_json": ("kiln.runtime.serialization", "save_json"),
    "load_json": ("kiln.runtime.serialization", "load_json"),
    "register_func": ("kiln.runtime.registry", "register_func"),
    "get_global_func": ("kiln.runtime.registry", "get_global_func"),
    "list_global_func_names": ("kiln.runtime.registry", "list_global_func_names"),
    "remove_global_func": ("kiln.runtime.registry", "remove_global_func"),
    "convert": ("kiln.runtime.packed_func", "convert"),
    "PackedFunc": ("kiln.runtime.packed_func", "PackedFunc"),
    # compiler names
    "IRModule": ("kiln.ir.module", "IRModule"),
    "build": ("kiln.driver.build_module", "build"),
    "lower": ("kiln.te.lowering", "lower"),
    # pre-0.7 spelling kept by the seed documents (tvm.placeholder is te.placeholder)
    "placeholder": ("kiln.te.operation", "placeholder"),
}

__getattr__, __dir__ = attach(__name__, _LAZY)

# Every module that defines node types, or registers what nodes name (operators for Op nodes):
# load_json and type lookups import them on demand, so saved IR loads in a fresh process.
# tests/runtime/test_serialization_fresh_process.py checks this list is complete.
register_node_type_modules(
    "kiln.ir.base", "kiln.ir.type", "kiln.ir.expr", "kiln.ir.attrs", "kiln.ir.adt",
    "kiln.ir.function", "kiln.ir.module", "kiln.ir.op", "kiln.ir.transform",
    "kiln.arith.int_set", "kiln.tir.expr", "kiln.tir.stmt", "kiln.tir.buffer",
    "kiln.tir.function", "kiln.tir.transform.base", "kiln.te.tensor", "kiln.target.target",
    "kiln.relay.base", "kiln.relay.expr", "kiln.relay.adt", "kiln.relay.op",
    "kiln.relay.op.op_attrs", "kiln.relay.transform", "kiln.runtime.vm.memory",
    "kiln.runtime.vm.values",
)
