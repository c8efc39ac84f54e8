"""AOT executor codegen, emitting half: an :class:`AotPlan` -> the C of the AOT module.

Entry points: :class:`AotOptions`, :func:`emit_aot` -> :class:`AotSource`.

The generated translation unit (``<mod>_lib0.c``, TVM's "metadata module") holds, in order:

* the pools: internal workspace pools as ``static uint8_t <pool>[N]`` in ``.bss.noinit.tvm``
  and the linked constants as ``static const uint8_t global_const_workspace[N]`` in
  ``.rodata.tvm``, a string literal of their bytes at their planned offsets, with a comment
  naming each constant, its offset, dtype and shape;
* ``tvmgen_<mod>___tvm_main__``: one call per fused kernel (each kernel's unpacked twin, with
  data pointers into the caller's buffers and the pools), then the copies into outputs.
  With ``unpacked-api`` it takes raw pointers (``float* a, ..., void* output0, ...,
  uint8_t* global_workspace_1_var``); otherwise it is a packed function of DLTensors
  (inputs, outputs, external pools);
* the entry point ``tvmgen_<mod>_run``: the C interface (``struct tvmgen_<mod>_inputs*``, ...)
  for ``interface-api=c``, else a packed function (crt runtime only; the C++ runtime's
  executor calls ``__tvm_main__`` itself, as TVM's does);
* for the packed interfaces, the ``TVMMetadata`` (``tvm/runtime/metadata_types.h``) and its
  getter (``tvmgen_<mod>_get_c_metadata`` for crt, ``get_c_metadata`` for the C++ runtime);
* with ``Runtime("crt", {"system-lib": True})``, the CRT function registry and
  ``TVMSystemLibEntryPoint`` (:func:`~kiln.target.c_abi.crt_system_lib_source`).

Without USMP (``tir.usmp.enable=False``) the workspace comes from ``TVMBackendAllocWorkspace``
once per run, in one block laid out by the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kiln.relay.backend.aot.aot_codegen import AotPlan, Ref, constant_bytes, sanitize_name
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.target.c_abi import c_type, crt_system_lib_source, function_signature

__all__ = ["AotOptions", "AotSource", "PoolInfo", "emit_aot", "constant_array_source",
           "c_bytes_literal", "UNUSED_PACKED_PARAMS"]



@dataclass(frozen=True)
class AotOptions:
    """The executor/runtime settings the emitter follows."""

    interface_api: str = "packed"
    unpacked: bool = False
    runtime: str = "cpp"
    system_lib: bool = False
    usmp: bool = True
    workspace_alignment: int = 16
    constant_alignment: int = 16
    target: str = "c"
    # the workspace pools, filled in order; the application provides user-given pools
    workspace_pools: tuple[str, ...] = ("global_workspace",)
    user_workspace_pools: bool = False
    constant_pool: str = "global_const_workspace"
    user_constant_pool: bool = False


@dataclass(frozen=True)
class PoolInfo:
    """A pool of the AOT main: its name, size, whether it is ``internal`` (a static array in
    the generated code) and whether it holds constants."""

    name: str
    size: int
    internal: bool
    constant: bool = False


@dataclass
class AotSource:
    """The generated AOT module: C source, interface header (``interface-api=c``), the
    packed functions it defines and its pools."""

    lib0: str
    header: str | None
    packed_functions: list[str] = field(default_factory=list)
    pools: list[PoolInfo] = field(default_factory=list)
    workspace_size: int = 0  # bytes the application's TVMBackendAllocWorkspace must provide
    main_name: str = ""
    metadata_function: str | None = None


_PACKED_PARAMS = ("TVMValue* args, int* type_codes, int num_args, TVMValue* out_ret_value, "
                  "int* out_ret_tcode, void* resource_handle")
# packed functions use some of their parameters; this keeps -Wextra quiet about the rest
UNUSED_PACKED_PARAMS = ("  (void)args; (void)type_codes; (void)num_args; (void)out_ret_value;\n"
                        "  (void)out_ret_tcode; (void)resource_handle;\n")


def c_bytes_literal(data: bytes, per_line: int = 64) -> str:
    """``data`` as C string-literal lines of ``\\xHH`` escapes (gcc reads a literal far faster
    than a brace list of numbers: a million floats take seconds, not tens of seconds)."""
    if not data:
        return '  ""'
    digits = np.frombuffer(data.hex().encode(), dtype=np.uint8).reshape(-1, 2)
    escaped = np.empty((len(data), 4), dtype=np.uint8)
    escaped[:, 0], escaped[:, 1], escaped[:, 2:] = ord("\\"), ord("x"), digits
    text = escaped.tobytes().decode()
    step = 4 * per_line
    return "\n".join(f'  "{text[i:i + step]}"' for i in range(0, len(text), step))


def _describe_constant(name: str, value: Any, offset: int) -> str:
    shape = list(getattr(value, "shape", np.shape(value)))
    dtype = str(getattr(value, "dtype", np.asarray(value).dtype))
    return f" *   {name}: offset {offset}, {dtype} {shape}, {len(constant_bytes(value))} bytes"


def constant_array_source(symbol: str, value: Any, alignment: int = 16) -> str:
    """``static const uint8_t symbol[n]`` holding a constant's bytes, with a comment naming
    its dtype and shape."""
    data = constant_bytes(value)
    return (f"/*\n{_describe_constant(symbol, value, 0)}\n */\n"
            f"static const uint8_t {symbol}[{max(len(data), 1)}] "
            f"__attribute__((aligned({alignment}))) =\n{c_bytes_literal(data)};")


class _Emitter:
    def __init__(self, plan: AotPlan, options: AotOptions) -> None:
        self.plan, self.options = plan, options
        self.prefix = plan.prefix
        self.main = f"{self.prefix}___tvm_main__"
        self.parts: list[str] = []
        self.io_in_pools = bool(plan.io_offsets)
        self.pools: list[PoolInfo] = []
        if plan.constants:
            self.pools.append(PoolInfo(options.constant_pool, plan.constant_pool_size,
                                       not options.user_constant_pool, True))
        self.workspace_alloc = 0  # TVMBackendAllocWorkspace bytes (USMP off)
        sizes = plan.workspace.sizes or [plan.workspace.size]
        if options.usmp:
            internal = (options.runtime == "crt" and not self.io_in_pools
                        and not options.user_workspace_pools)
            for name, size in zip(options.workspace_pools, sizes):
                if size or options.user_workspace_pools:
                    self.pools.append(PoolInfo(name, size, internal))
        else:
            self.workspace_alloc = plan.workspace.size
        self.pool_vars = {p.name: f"{p.name}_{i}_var" for i, p in enumerate(self.pools)}
        if not options.usmp and plan.workspace.size:
            self.pool_vars[options.workspace_pools[0]] = f"{options.workspace_pools[0]}_var"
        self.packed: list[str] = []

    # -- pieces ------------------------------------------------------------------------------
    def main_params(self) -> list[tuple[str, str]]:
        """``(C type, name)`` of the unpacked main's parameters."""
        params = []
        if not self.io_in_pools:
            params += [(f"{c_type(s.dtype)}*", sanitize_name(s.name)) for s in self.plan.inputs]
            params += [("void*", f"output{k}") for k in range(len(self.plan.outputs))]
        params += [("uint8_t*", self.pool_vars[p.name]) for p in self.pools]
        return params

    def ref(self, ref: Ref) -> str:
        if ref.kind == "input":
            return sanitize_name(self.plan.inputs[ref.index].name)
        if ref.kind == "output":
            return f"output{ref.index}"
        pool = (self.options.workspace_pools[ref.pool] if ref.kind == "pool"
                else self.options.constant_pool)
        return f"(&{self.pool_vars[pool]}[{ref.index}])"

    def emit_pools(self) -> None:
        for pool in self.pools:
            if not pool.internal:
                continue
            if pool.constant:
                self.emit_constant_pool()
            else:
                self.parts.append(
                    f'__attribute__((section(".bss.noinit.tvm"), '
                    f"aligned({self.options.workspace_alignment})))\n"
                    f"static uint8_t {pool.name}[{pool.size}];")

    def emit_constant_pool(self) -> None:
        align, pool = self.options.constant_alignment, self.options.constant_pool
        lines = [f" * {pool}: the linked constants ({self.plan.constant_pool_size} bytes)"]
        lines += [_describe_constant(name, value, offset)
                  for name, value, offset in self.plan.constants]
        self.parts.append(
            "/*\n" + "\n".join(lines) + "\n */\n"
            f'__attribute__((section(".rodata.tvm"), aligned({align})))\n'
            f"static const uint8_t {pool}[{max(self.plan.constant_pool_size, 1)}] =\n"
            f"{c_bytes_literal(_constant_pool_bytes(self.plan))};")

    def emit_prototypes(self) -> None:
        seen = set()
        for call in self.plan.calls:
            name = call.kernel.name
            if name in seen:
                continue
            seen.add(name)
            signature = function_signature(call.kernel.prim_func)
            if signature.scalars:
                raise TVMError(f"AOT: kernel {name} has symbolic shapes; the AOT executor "
                               "needs static shapes (use the VM for dynamic shapes)")
            types = [f"{c_type(b.dtype)}*" for b in signature.buffers]
            if call.scratch is not None:
                self.parts.append(f"int32_t {name}_unpacked_ws({', '.join(types)}, uint8_t*);")
            else:
                self.parts.append(f"int32_t {name}_unpacked({', '.join(types) or 'void'});")

    def main_body(self) -> list[str]:
        lines = []
        fail = "return -1;"
        ws = self.pool_vars.get(self.options.workspace_pools[0])
        if self.workspace_alloc:
            lines.append(f"  uint8_t* {ws} = (uint8_t*)TVMBackendAllocWorkspace(1, 0, "
                         f"(uint64_t){self.workspace_alloc}, 0, 8);")
            lines.append(f"  if ({ws} == NULL) return -1;")
            fail = f"{{ TVMBackendFreeWorkspace(1, 0, {ws}); return -1; }}"
        for call in self.plan.calls:
            signature = function_signature(call.kernel.prim_func)
            args = [f"({c_type(b.dtype)}*){self.ref(r)}"
                    for b, r in zip(signature.buffers, call.args)]
            function = f"{call.kernel.name}_unpacked"
            if call.scratch is not None:
                function += "_ws"
                args.append(self.ref(call.scratch))
            lines.append(f"  /* {call.source} */")
            lines.append(f"  if ({function}({', '.join(args)}) != 0) {fail}")
        for src, dst, nbytes in self.plan.copies:
            lines.append(f"  for (int64_t i = 0; i < {nbytes}; ++i) "
                         f"((uint8_t*){self.ref(dst)})[i] = ((const uint8_t*){self.ref(src)})[i];")
        if self.workspace_alloc:
            lines.append(f"  if (TVMBackendFreeWorkspace(1, 0, {ws}) != 0) return -1;")
        lines.append("  return 0;")
        return lines

    def emit_main(self) -> None:
        params = ", ".join(f"{t} {n}" for t, n in self.main_params()) or "void"
        body = "\n".join(self.main_body())
        if self.options.unpacked:
            self.parts.append(f"TVM_DLL int32_t {self.main}({params});\n"
                              f"int32_t {self.main}({params}) {{\n{body}\n}}")
            return
        # packed: DLTensors for inputs, outputs and external pools; internal pools are ours
        impl = f"{self.main}_impl"
        self.parts.append(f"static int32_t {impl}({params}) {{\n{body}\n}}")
        self.parts.append(self.packed_forward(self.main, impl))
        self.packed.append(self.main)

    def tensor_args(self) -> list[str]:
        """Names of the packed main's DLTensor arguments, in order."""
        names = [s.name for s in self.plan.inputs] + [s.name for s in self.plan.outputs]
        return names + [p.name for p in self.pools if not p.internal]

    def packed_forward(self, name: str, target: str) -> str:
        """A packed function ``name`` unwrapping DLTensor arguments into ``target``'s
        pointers (internal pools passed directly)."""
        expected = self.tensor_args()
        count = len(expected)
        params = self.main_params()
        num_io = len(params) - len(self.pools)
        data = [f"({ctype})kiln_aot_data(args, {k})" for k, (ctype, _) in
                enumerate(params[:num_io])]
        k = num_io
        for pool in self.pools:
            if pool.internal:
                data.append(f"(uint8_t*)&{pool.name}")
            else:
                data.append(f"(uint8_t*)kiln_aot_data(args, {k})")
                k += 1
        return (
            f"TVM_DLL int32_t {name}({_PACKED_PARAMS});\n"
            f"int32_t {name}({_PACKED_PARAMS}) {{\n{UNUSED_PACKED_PARAMS}"
            f"  if (num_args != {count}) {{\n"
            f'    TVMAPISetLastError("{name}: expected {count} DLTensor arguments '
            f'({", ".join(expected)})");\n    return -1;\n  }}\n'
            f"  for (int i = 0; i < {count}; ++i) {{\n"
            "    if (type_codes[i] != kTVMDLTensorHandle && type_codes[i] != kTVMNDArrayHandle) {"
            f'\n      TVMAPISetLastError("{name}: every argument must be a DLTensor");\n'
            "      return -1;\n    }\n  }\n"
            f"  return {target}({', '.join(data)});\n}}")

    def emit_entry(self) -> None:
        run = f"{self.prefix}_run"
        if self.options.runtime != "crt":
            return  # the C++ runtime's AotExecutor calls __tvm_main__
        if self.options.interface_api == "c":
            self.emit_c_interface(run)
        elif self.options.unpacked:
            self.parts.append(self.packed_forward(run, self.main))
            self.packed.append(run)
        else:
            self.parts.append(f"TVM_DLL int32_t {run}({_PACKED_PARAMS});\n"
                              f"int32_t {run}({_PACKED_PARAMS}) {{\n"
                              f"{UNUSED_PACKED_PARAMS}"
                              f"  return {self.main}(args, type_codes, num_args, out_ret_value, "
                              "out_ret_tcode, resource_handle);\n}")
            self.packed.append(run)

    def emit_c_interface(self, run: str) -> None:
        mod = self.plan.mod_name
        pools_struct = f"struct tvmgen_{mod}_workspace_pools"
        external = [p for p in self.pools if not p.internal]
        params, args = [], []
        if self.io_in_pools:
            names = self.options.workspace_pools

            def where(spec: Any) -> str:
                pool, offset = self.plan.io_offsets[spec.name]
                return f"&((uint8_t*)workspace_pools->{sanitize_name(names[pool])})[{offset}]"

            for what, specs in (("inputs", self.plan.inputs), ("outputs", self.plan.outputs)):
                members = "".join(f"\t.{sanitize_name(s.name)} = {where(s)},\n"
                                  for s in specs)
                self.parts.append(
                    f"struct tvmgen_{mod}_{what} tvmgen_{mod}_map_{what}(\n"
                    f"  {pools_struct}* workspace_pools\n){{\n"
                    f"struct tvmgen_{mod}_{what} ret = {{\n{members}}};\nreturn ret;\n}}")
        else:
            params += [f"struct tvmgen_{mod}_inputs* inputs",
                       f"struct tvmgen_{mod}_outputs* outputs"]
            args += [f"inputs->{sanitize_name(s.name)}" for s in self.plan.inputs]
            args += [f"outputs->{sanitize_name(s.name)}" for s in self.plan.outputs]
        if external:
            params.append(f"{pools_struct}* workspace_pools")
        for pool in self.pools:
            args.append(f"((uint8_t*)&{pool.name})" if pool.internal
                        else f"((uint8_t*)workspace_pools->{sanitize_name(pool.name)})")
        self.parts.append(f"int32_t {run}({', '.join(params) or 'void'}) {{"
                          f"return {self.main}({','.join(args)});\n}}")

    def emit_metadata(self) -> str | None:
        if self.options.interface_api == "c":
            return None
        crt = self.options.runtime == "crt"
        getter = f"{self.prefix}_get_c_metadata" if crt else "get_c_metadata"
        sym = "kTvmgenMetadata"
        lines = ["#include <tvm/runtime/metadata_types.h>"]

        def infos(what: str, specs: list[tuple[str, tuple[int, ...], str]]) -> str:
            entries = []
            for i, (name, shape, dtype) in enumerate(specs):
                shape_sym = f"{sym}_{what}_{i}_shape"
                dims = ", ".join(f"{int(d)}LL" for d in shape) or "0"
                lines.append(f"static const int64_t {shape_sym}[{max(len(shape), 1)}] = "
                             f"{{{dims}}};")
                t = DataType(dtype)
                entries.append(f'{{"{name}", {shape_sym}, {len(shape)}, '
                               f"{{{int(t.type_code)}, {t.bits}, {t.lanes}}}}}")
            if not entries:
                return "NULL"
            lines.append(f"static const struct TVMTensorInfo {sym}_{what}[{len(entries)}] = "
                         "{\n  " + ",\n  ".join(entries) + "\n};")
            return f"{sym}_{what}"

        inputs = infos("inputs", [(s.name, s.shape, s.dtype) for s in self.plan.inputs])
        outputs = infos("outputs", [(s.name, s.shape, s.dtype) for s in self.plan.outputs])
        external = [p for p in self.pools if not p.internal]
        pools = infos("workspace_pools", [(p.name, (p.size,), "uint8") for p in external])
        lines.append(
            f"static const struct TVMMetadata {sym}[1] = {{{{\n"
            f"  1, {inputs}, {len(self.plan.inputs)}, {outputs}, {len(self.plan.outputs)},\n"
            f'  {pools}, {len(external)}, NULL, 0, "{self.prefix}"\n}}}};')
        lines.append(f"TVM_DLL int32_t {getter}({_PACKED_PARAMS});\n"
                     f"int32_t {getter}({_PACKED_PARAMS}) {{\n{UNUSED_PACKED_PARAMS}"
                     f"  out_ret_value[0].v_handle = (void*)&{sym};\n"
                     "  out_ret_tcode[0] = kTVMOpaqueHandle;\n  return 0;\n}")
        self.parts.append("\n".join(lines))
        self.packed.append(getter)
        return getter


def _preamble(options: AotOptions, prefix: str) -> str:
    return "\n".join([
        f"/* Generated by kiln: the AOT executor of module {prefix} (target {options.target},"
        f" runtime {options.runtime}). */",
        "#include <stddef.h>",
        "#include <stdbool.h>",
        "#include <stdint.h>",
        "#include <math.h>",
        "#include <tvm/runtime/c_runtime_api.h>",
        "#include <tvm/runtime/c_backend_api.h>",
        "#ifndef NULL\n#define NULL ((void*)0)\n#endif",
        "static inline void* kiln_aot_data(TVMValue* args, int i) {",
        "  DLTensor* t = (DLTensor*)args[i].v_handle;",
        "  return (void*)((uint8_t*)t->data + t->byte_offset);",
        "}",
    ])


def _constant_pool_bytes(plan: AotPlan) -> bytes:
    """The constant pool's initial contents: each constant's bytes at its offset."""
    data = bytearray(plan.constant_pool_size)
    for _, value, offset in plan.constants:
        raw = constant_bytes(value)
        data[offset:offset + len(raw)] = raw
    return bytes(data)


def emit_aot(plan: AotPlan, options: AotOptions, kernel_functions: list[str]) -> AotSource:
    """Write the AOT module of ``plan``; ``kernel_functions`` are the kernels' packed names
    (registered with the CRT system library next to the AOT functions)."""
    em = _Emitter(plan, options)
    em.parts.append(_preamble(options, plan.prefix))
    if options.interface_api == "c":
        em.parts.append(f"#include <tvmgen_{plan.mod_name}.h>")
    em.emit_pools()
    em.emit_prototypes()
    em.emit_main()
    em.emit_entry()
    metadata = em.emit_metadata()
    if options.runtime == "crt" and options.system_lib:
        em.parts.append(crt_system_lib_source(em.packed + list(kernel_functions),
                                              defined_here=em.packed))
    header = None
    if options.interface_api == "c":
        from kiln.relay.backend.aot.interface_c import interface_header

        external = [(p.name, p.size, _constant_pool_bytes(plan) if p.constant else None)
                    for p in em.pools if not p.internal]
        header = interface_header(plan.mod_name, plan.inputs, plan.outputs, external,
                                  em.workspace_alloc, bool(plan.io_offsets))
    return AotSource("\n\n".join(em.parts) + "\n", header, em.packed, em.pools,
                     em.workspace_alloc, em.main, metadata)
