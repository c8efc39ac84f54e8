"""The AOT executor's compiler side (TVM's ``src/relay/backend/aot``, ``tir.usmp``).

Modules: :mod:`~kiln.relay.backend.aot.aot_codegen` (call list and pools from a fused
``main``), :mod:`~kiln.relay.backend.aot.usmp` (static memory planning),
:mod:`~kiln.relay.backend.aot.aot_emit` (the C of ``__tvm_main__``, the entry point, pools and
metadata), :mod:`~kiln.relay.backend.aot.interface_c` (``tvmgen_<mod>.h``) and
:mod:`~kiln.relay.backend.aot.build` (the AOT and CRT halves of ``relay.build``).
"""
