"""kiln.runtime: everything a deployed model needs, and nothing else from kiln.

Objects and containers, NDArray/Device/DataType/DLPack, PackedFunc and the global registry,
Module (shared libraries, system lib), params blobs, the graph executor and the VM.
This package imports nothing from the rest of kiln (a test checks it).
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "Object": ("kiln.runtime.object", "Object"),
    "register_object": ("kiln.runtime.object", "register_object"),
    "TVMError": ("kiln.runtime.error", "TVMError"),
    "KilnError": ("kiln.runtime.error", "KilnError"),
    "String": ("kiln.runtime.container", "String"),
    "Array": ("kiln.runtime.container", "Array"),
    "Map": ("kiln.runtime.container", "Map"),
    "ShapeTuple": ("kiln.runtime.container", "ShapeTuple"),
    "ADT": ("kiln.runtime.container", "ADT"),
    "Closure": ("kiln.runtime.container", "Closure"),
    "tuple_object": ("kiln.runtime.container", "tuple_object"),
    "DataType": ("kiln.runtime.dtype", "DataType"),
    "DataTypeCode": ("kiln.runtime.dtype", "DataTypeCode"),
    "DeviceType": ("kiln.runtime.device", "DeviceType"),
    "from_dlpack": ("kiln.runtime.ndarray", "from_dlpack"),
    "Device": ("kiln.runtime.device", "Device"),
    "device": ("kiln.runtime.device", "device"),
    "cpu": ("kiln.runtime.device", "cpu"),
    "NDArray": ("kiln.runtime.ndarray", "NDArray"),
    "ndarray": "kiln.runtime.ndarray",
    "nd": "kiln.runtime.ndarray",
    "empty": ("kiln.runtime.ndarray", "empty"),
    "save_param_dict": ("kiln.runtime.params", "save_param_dict"),
    "load_param_dict": ("kiln.runtime.params", "load_param_dict"),
    "save_json": ("kiln.runtime.serialization", "save_json"),
    "load_json": ("kiln.runtime.serialization", "load_json"),
    "PackedFunc": ("kiln.runtime.packed_func", "PackedFunc"),
    "convert": ("kiln.runtime.packed_func", "convert"),
    "register_func": ("kiln.runtime.registry", "register_func"),
    "get_global_func": ("kiln.runtime.registry", "get_global_func"),
    "Module": ("kiln.runtime.module", "Module"),
    "load_module": ("kiln.runtime.module", "load_module"),
    "system_lib": ("kiln.runtime.module", "system_lib"),
    "enabled": ("kiln.runtime.module", "enabled"),
    "num_threads": ("kiln.runtime.thread_pool", "num_threads"),
    "thread_pool": "kiln.runtime.thread_pool",
    "vm": "kiln.runtime.vm",
    "graph_executor": "kiln.runtime.graph_executor",
    "aot_executor": "kiln.runtime.aot_executor",
    "executor": "kiln.runtime.executor",
    "profiling": "kiln.runtime.profiling",
}

__getattr__, __dir__ = attach(__name__, _LAZY)
