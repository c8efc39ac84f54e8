"""The C interface header of an AOT build, ``tvmgen_<mod>.h`` (TVM's ``InterfaceCNode``).

Entry point: :func:`interface_header`.

Layout, as ``src/target/source/interface_c.cc`` in TVM v0.16 writes it: an include guard
``TVMGEN_<MOD>_H_``; a ``TVMGEN_<MOD>_<NAME>_SIZE`` byte-size macro per input and output;
``struct tvmgen_<mod>_inputs`` / ``_outputs`` of ``void*`` members named by the sanitized
tensor names; ``struct tvmgen_<mod>_workspace_pools`` when a pool is external (then also the
``tvmgen_<mod>_map_inputs/_map_outputs`` functions when I/O lives in it); the prototype of
``tvmgen_<mod>_run``; ``TVMGEN_<MOD>_WORKSPACE_SIZE``; ``<POOL>_WORKSPACE_POOL_SIZE`` per
external workspace pool and ``<POOL>_CONSTANT_POOL_SIZE`` / ``_CONSTANT_POOL_DATA`` (the
bytes to put in it) per external constant pool.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln.relay.backend.aot.aot_codegen import TensorSpec, sanitize_name

__all__ = ["interface_header"]


def _brief(mod_name: str, text: str) -> str:
    return f'/*!\n * \\brief {text} for TVM module "{mod_name}" \n */\n'


def _macro(mod_name: str, brief: str, name: str, value: int) -> str:
    macro = f"tvmgen_{mod_name}_{name}".upper()
    return _brief(mod_name, brief) + f"#define {macro} {value}\n"


def _struct(mod_name: str, suffix: str, members: Sequence[str]) -> str:
    body = "".join(f"  void* {sanitize_name(m)};\n" for m in members)
    return f"struct tvmgen_{mod_name}_{suffix} {{\n{body}}};\n\n"


def interface_header(mod_name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec],
                     external_pools: Sequence[tuple[str, int, bytes | None]],
                     workspace_size: int, io_in_pools: bool) -> str:
    """The text of ``tvmgen_<mod_name>.h``; ``external_pools`` are ``(name, size, data)`` of
    the pools the application provides (``data``: the initial bytes of a constant pool)."""
    guard = f"TVMGEN_{mod_name}_H".upper()
    parts = [f"#ifndef {guard}_\n#define {guard}_\n#include <stdint.h>\n\n"
             "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n"]
    for spec in inputs:
        name = sanitize_name(spec.name)
        parts.append(_macro(mod_name, f"Input tensor {name} size (in bytes)", f"{name}_size",
                            spec.nbytes))
    for spec in outputs:
        name = sanitize_name(spec.name)
        parts.append(_macro(mod_name, f"Output tensor {name} size (in bytes)", f"{name}_size",
                            spec.nbytes))
    parts.append(_brief(mod_name, "Input tensor pointers"))
    parts.append(_struct(mod_name, "inputs", [s.name for s in inputs]))
    parts.append(_brief(mod_name, "Output tensor pointers"))
    parts.append(_struct(mod_name, "outputs", [s.name for s in outputs]))
    if external_pools:
        parts.append(_brief(mod_name, "Workspace pool pointers"))
        parts.append(_struct(mod_name, "workspace_pools",
                             [name for name, _, _ in external_pools]))
    pools_struct = f"struct tvmgen_{mod_name}_workspace_pools"
    if io_in_pools:
        for what in ("inputs", "outputs"):
            parts.append(
                f'/*!\n * \\brief Maps I/O inside the workspace pools for TVM module "{mod_name}"'
                "\n * \\param workspace_pools Workspace memory pool struct for the module \n"
                " * \\return I/O tensor struct for the module \n */\n"
                f"struct tvmgen_{mod_name}_{what} tvmgen_{mod_name}_map_{what}(\n"
                f"  {pools_struct}* workspace_pools\n);\n\n")
    params = []
    doc = f'/*!\n * \\brief entrypoint function for TVM module "{mod_name}"\n'
    if not io_in_pools:
        doc += " * \\param inputs Input tensors for the module \n"
        doc += " * \\param outputs Output tensors for the module \n"
        params += [f"  struct tvmgen_{mod_name}_inputs* inputs",
                   f"  struct tvmgen_{mod_name}_outputs* outputs"]
    if external_pools:
        doc += " * \\param workspace_pools Workspace memory pool pointers for the module \n"
        params.append(f"  {pools_struct}* workspace_pools")
    parts.append(doc + " */\n" + f"int32_t tvmgen_{mod_name}_run(\n" + ",\n".join(params)
                 + "\n);\n")
    parts.append(_macro(mod_name, "Workspace size", "WORKSPACE_SIZE", workspace_size))
    for name, size, data in external_pools:
        pool = sanitize_name(name)
        if data is None:
            parts.append(_macro(mod_name, f"{pool} size", f"{pool}_WORKSPACE_POOL_SIZE", size))
            continue
        prefix = f"tvmgen_{mod_name}_{pool}".upper()
        rows = [", ".join(f"0x{b:02x}" for b in data[i:i + 16]) for i in range(0, len(data), 16)]
        parts.append(_brief(mod_name, f"{pool} initialization data")
                     + f"#define {prefix}_CONSTANT_POOL_SIZE {len(data)}\n"
                     + f"#define {prefix}_CONSTANT_POOL_DATA \\\n    "
                     + ", \\\n    ".join(rows) + "\n")
    parts.append(f"\n#ifdef __cplusplus\n}}\n#endif\n\n#endif // {guard}_\n")
    return "".join(parts)
