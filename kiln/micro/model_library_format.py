"""Model Library Format export (TVM v0.16's ``tvm.micro.model_library_format``).

Entry points: :func:`export_model_library_format`, :func:`get_standalone_crt_dir`,
:func:`read_metadata`, :class:`UnsupportedInModelLibraryFormatError`.

The tar (``docs/arch/model_library_format.rst``; file names as v0.16's exporter writes them,
plus the names the format's documentation gives)::

    metadata.json                         version 7; per module: model_name, export_datetime,
                                          memory (sids, functions.main, operator_functions,
                                          and kiln's pools), target, executors, style
    codegen/host/src/<mod>_lib0.c ...     one file per C module (lib0 = AOT main / registry)
    codegen/host/lib/<mod>_lib<n>.o       LLVM objects
    codegen/host/include/tvmgen_<mod>.h   the C interface (interface-api=c)
    executor-config/graph/<mod>.graph     graph JSON (graph executor; also graph.json for one)
    parameters/<mod>.params               the constants, TVM's params blob
    src/<mod>.relay                       the Relay of the build (also src/relay.txt for one)
    runtime/                              the standalone CRT (AOT with Runtime("crt"))
    templates/crt_config.h.template, templates/platform.c.template

Exports are byte-for-byte reproducible: tar entries carry uid/gid 0 and the mtime of
``SOURCE_DATE_EPOCH`` (0 when unset), which also dates ``export_datetime``.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import pathlib
import tarfile
from typing import Any

from kiln.micro.crt_build import get_standalone_crt_dir
from kiln.runtime.error import TVMError
from kiln.runtime.serialization import read_json

__all__ = ["export_model_library_format", "get_standalone_crt_dir", "read_metadata", "model_files",
           "UnsupportedInModelLibraryFormatError", "GENERATED_VERSION"]

GENERATED_VERSION = 7
STANDALONE_CRT_URL = "./runtime"
CRT_TEMPLATE_FILES_URL = "./templates"
# the CRT's template files -> their names in the tar
_CRT_TEMPLATES = {"template/crt_config-template.h": "crt_config.h.template",
                  "template/platform-template.c": "platform.c.template"}


class UnsupportedInModelLibraryFormatError(TVMError):
    """Raised when export_model_library_format does not support the given module tree."""


def _epoch() -> int:
    return int(os.environ.get("SOURCE_DATE_EPOCH", "0"))


def _c_modules(lib: Any) -> list[Any]:
    """The modules of a build whose code goes in ``codegen/host``, root first."""
    out, stack = [], [lib]
    while stack:
        module = stack.pop(0)
        out.append(module)
        stack.extend(module.imports)
    return out


def _codegen_files(mod: Any) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    src = lib_index = 0
    for module in _c_modules(mod.lib):
        if module.type_key == "c" and hasattr(module, "source"):
            files[f"codegen/host/src/{mod.libmod_name}_lib{src}.c"] = module.source.encode()
            src += 1
        elif hasattr(module, "sources") and hasattr(module, "objects"):  # a compiled library
            for text in module.sources.values():
                files[f"codegen/host/src/{mod.libmod_name}_lib{src}.c"] = text.encode()
                src += 1
            for data in module.objects.values():
                files[f"codegen/host/lib/{mod.libmod_name}_lib{lib_index}.o"] = data
                lib_index += 1
        elif module.type_key not in ("metadata_module", "GraphExecutorFactory"):
            raise UnsupportedInModelLibraryFormatError(
                f"Don't know how to export non-c or non-llvm modules; found: {module!r}")
    return files


def _tensor_entry(shape: Any, dtype: str) -> dict[str, Any]:
    from kiln.runtime.dtype import DataType

    t = DataType(dtype)
    count = 1
    for d in shape:
        count *= int(d)
    return {"size": (count * t.bits * t.lanes + 7) // 8, "dtype": dtype}


def _sid_map(graph_json: str) -> list[dict[str, Any]]:
    """One entry per storage id of a graph (TVM's ``_build_sid_map``)."""
    graph = json.loads(graph_json)
    seen, out = set(), []
    shapes, dtypes = graph["attrs"]["shape"][1], graph["attrs"]["dltype"][1]
    for eid, sid in enumerate(graph["attrs"]["storage_id"][1]):
        if sid in seen:
            continue
        seen.add(sid)
        entry = {"storage_id": sid, "size_bytes": _tensor_entry(shapes[eid], dtypes[eid])["size"]}
        node_of_entry = [n for n, start in enumerate(graph["node_row_ptr"][:-1])
                         if start <= eid < graph["node_row_ptr"][n + 1]][0]
        if node_of_entry in graph["arg_nodes"]:
            entry["input_binding"] = graph["nodes"][node_of_entry]["name"]
        out.append(entry)
    return out


def _operator_functions(lowered: dict[str, Any]) -> list[dict[str, Any]]:
    from kiln.relay.backend.aot.build import kernel_workspace_bytes

    return [{"function_name": name,
             "workspace": [{"device": 1,
                            "workspace_size_bytes": kernel_workspace_bytes(f.prim_func)}]}
            for name, f in sorted(lowered.items())]


def _memory_map(mod: Any) -> dict[str, Any]:
    """``memory`` of metadata.json: per-function workspace / constants / IO sizes, graph
    storage ids, and (kiln) the pools with their sizes and live-set lower bounds."""
    from kiln.relay.backend.executor_factory import AOTExecutorFactoryModule

    main_func = mod.ir_mod["main"]
    ret_type = main_func.checked_type.ret_type
    outputs = list(ret_type.fields) if hasattr(ret_type, "fields") else [ret_type]
    if isinstance(mod, AOTExecutorFactoryModule):
        plan = mod.plan
        ops = _operator_functions(mod.lowered)
        inputs = {s.name: _tensor_entry(s.shape, s.dtype) for s in plan.inputs}
        out_entries = {s.name: _tensor_entry(s.shape, s.dtype) for s in plan.outputs}
        scratch = max((op["workspace"][0]["workspace_size_bytes"] for op in ops), default=0)
        main = {"device": 1, "workspace_size_bytes": plan.workspace.size + scratch,
                "constants_size_bytes": plan.constant_pool_size,
                "io_size_bytes": sum(s.nbytes for s in plan.inputs + plan.outputs),
                "inputs": inputs, "outputs": out_entries}
        pools = [{"pool_name": p.name, "size_bytes": p.size, "internal": p.internal,
                  "constant": p.constant} for p in mod.aot.pools]
        for pool in pools:
            if not pool["constant"]:
                pool["lower_bound_bytes"] = plan.workspace.lower_bound
                pool["algorithm"] = plan.workspace.algorithm
        return {"functions": {"main": [main], "operator_functions": ops}, "pools": pools}
    ops = _operator_functions(mod.lowered)
    inputs = {p.name_hint: _tensor_entry(p.checked_type.concrete_shape, str(p.checked_type.dtype))
              for p in main_func.params}
    from kiln.relay.backend.aot.build import output_tensor_names

    names = output_tensor_names(main_func) or (
        ["output"] if len(outputs) == 1 else [f"output{i}" for i in range(len(outputs))])
    out_entries = {n: _tensor_entry(t.concrete_shape, str(t.dtype))
                   for n, t in zip(names, outputs)}
    const_bytes = sum(v.numpy().nbytes for v in mod.params.values())
    io = sum(e["size"] for e in list(inputs.values()) + list(out_entries.values()))
    main = {"device": 1, "workspace_size_bytes": mod.stats.get("planned_bytes", 0),
            "constants_size_bytes": const_bytes, "io_size_bytes": io, "inputs": inputs,
            "outputs": out_entries}
    return {"sids": _sid_map(mod.graph_json),
            "functions": {"main": [main], "operator_functions": ops}}


def _module_metadata(mod: Any) -> dict[str, Any]:
    from kiln.relay.backend.executor_factory import AOTExecutorFactoryModule

    is_aot = isinstance(mod, AOTExecutorFactoryModule)
    date = datetime.datetime.fromtimestamp(_epoch(), datetime.timezone.utc)
    target = list(mod.target.values()) if isinstance(mod.target, dict) else [mod.target]
    entry = {
        "model_name": mod.libmod_name,
        "export_datetime": date.strftime("%Y-%m-%d %H:%M:%SZ"),
        "memory": _memory_map(mod),
        "target": [str(t) for t in target],
        "executors": ["aot" if is_aot else "graph"],
        "style": "full-model",
    }
    if is_aot and mod.runtime.name == "crt":
        from kiln import __version__

        entry["external_dependencies"] = [{"short_name": "tvm_standalone_crt",
                                           "url": STANDALONE_CRT_URL, "url_type": "mlf_path",
                                           "version_spec": __version__}]
    return entry


def model_files(mod: Any) -> dict[str, bytes]:
    """The per-model files of the tar (codegen, executor-config, parameters, src), by path."""
    from kiln.relay.backend.executor_factory import AOTExecutorFactoryModule
    from kiln.runtime.params import save_param_dict

    name = mod.libmod_name
    files = _codegen_files(mod)
    is_aot = isinstance(mod, AOTExecutorFactoryModule)
    if is_aot:
        if mod.header is not None:
            files[f"codegen/host/include/tvmgen_{name}.h"] = mod.header.encode()
        params = {cname: value for cname, value, _ in mod.plan.constants}
        params.update(mod.params)
    else:
        params = dict(mod.params)
        graph = mod.get_executor_config().encode()
        files[f"executor-config/graph/{name}.graph"] = graph
    files[f"parameters/{name}.params"] = bytes(save_param_dict(params))
    relay_text = str(mod.ir_mod).encode()
    files[f"src/{name}.relay"] = relay_text
    return files


def _crt_files() -> dict[str, pathlib.Path]:
    """``runtime/...`` and ``templates/...`` entries from the standalone CRT."""
    root = pathlib.Path(get_standalone_crt_dir())
    if not (root / "include").is_dir():
        raise TVMError(f"the standalone C runtime is missing at {root} (expected include/, "
                       "src/ and template/); an AOT build for Runtime('crt') ships it in "
                       "the Model Library Format's runtime/ directory")
    files = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files[f"runtime/{path.relative_to(root).as_posix()}"] = path
    for source, name in _CRT_TEMPLATES.items():
        if not (root / source).is_file():
            raise TVMError(f"the standalone C runtime at {root} has no {source}")
        files[f"templates/{name}"] = root / source
    return files


def export_model_library_format(mods: Any, file_name: str | os.PathLike) -> pathlib.Path:
    """Write the build result(s) of ``relay.build`` as a Model Library Format tar.

    Example
    -------
    >>> with tvm.transform.PassContext(opt_level=3):                           # doctest: +SKIP
    ...     module = relay.build(mod, target, runtime=Runtime("crt"),
    ...                          executor=Executor("aot", {"interface-api": "c",
    ...                                                    "unpacked-api": True}))
    >>> tvm.micro.export_model_library_format(module, "model.tar")            # doctest: +SKIP
    """
    from kiln.relay.backend.executor_factory import (
        AOTExecutorFactoryModule,
        GraphExecutorFactoryModule,
    )

    modules = list(mods) if isinstance(mods, list | tuple) else [mods]
    for mod in modules:
        if not isinstance(mod, AOTExecutorFactoryModule | GraphExecutorFactoryModule):
            raise UnsupportedInModelLibraryFormatError(
                f"Don't know how to export module of type {type(mod)!r}; export the result "
                "of relay.build")
    names = [m.libmod_name for m in modules]
    if len(set(names)) != len(names):
        raise TVMError(f"Multiple modules should have unique names; got {names}")
    metadata = {"version": GENERATED_VERSION,
                "modules": {m.libmod_name: _module_metadata(m) for m in modules}}
    files: dict[str, bytes | pathlib.Path] = {
        "metadata.json": json.dumps(metadata, indent=2, sort_keys=True).encode()}
    for mod in modules:
        files.update(model_files(mod))
    if len(modules) == 1:  # the file names the format's documentation gives, for one model
        name = modules[0].libmod_name
        files["src/relay.txt"] = files[f"src/{name}.relay"]
        graph = files.get(f"executor-config/graph/{name}.graph")
        if graph is not None:
            files["executor-config/graph/graph.json"] = graph
    if any(isinstance(m, AOTExecutorFactoryModule) and m.runtime.name == "crt"
           for m in modules):
        files.update(_crt_files())
    path = pathlib.Path(file_name)
    _write_tar(path, files)
    return path


def _write_tar(path: pathlib.Path, files: dict[str, bytes | pathlib.Path]) -> None:
    epoch = _epoch()
    dirs = sorted({str(pathlib.PurePosixPath(n).parents[i]) for n in files
                   for i in range(len(pathlib.PurePosixPath(n).parents) - 1)})
    with tarfile.open(path, "w") as tar:
        for name in ["."] + [f"./{d}" for d in dirs]:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for name in sorted(files):
            data = files[name]
            data = data.read_bytes() if isinstance(data, pathlib.Path) else data
            info = tarfile.TarInfo(f"./{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, epoch
            tar.addfile(info, io.BytesIO(data))


_MAX_METADATA_BYTES = 64 << 20  # a (compressed) archive could declare any size


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The ``metadata.json`` of a Model Library Format tar, checked for the version."""
    try:
        with tarfile.open(path) as tar:
            member = tar.extractfile("./metadata.json")
            if member is None:
                raise KeyError("metadata.json")
            metadata = read_json(member.read(_MAX_METADATA_BYTES + 1), "metadata.json")
        if not isinstance(metadata, dict):
            raise TVMError(f"metadata.json holds a {type(metadata).__name__}, not an object")
    except (tarfile.TarError, KeyError, OSError, EOFError, TVMError) as err:
        raise TVMError(f"{path} is not a Model Library Format tar with a readable "
                       f"metadata.json: {err}") from None
    if metadata.get("version") != GENERATED_VERSION:
        raise TVMError(f"{path}: Model Library Format version {metadata.get('version')}; "
                       f"kiln reads version {GENERATED_VERSION}")
    return metadata
