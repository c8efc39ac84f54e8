"""Read a Model Library Format archive (TVM v0.16's layout) for a standalone build.

Entry points: :class:`ModelLibrary`, :class:`TensorInfo`.

What a board build needs from the archive: the executor (``metadata.json``), the generated C
(``codegen/host/src/*.c`` and ``codegen/host/include``), the C runtime (``runtime/``), the
``crt_config.h`` template, and each input/output's name, dtype, size and (where the archive
says it) shape. For AOT the names and byte sizes come from ``tvmgen_<mod>.h`` (the structs
the program fills); for the graph executor from the graph JSON.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kiln.micro.board.base import MicroBoardError
from kiln.runtime.archive import safe_extract
from kiln.runtime.error import TVMError
from kiln.runtime.params import load_param_dict
from kiln.runtime.serialization import read_json

__all__ = ["ModelLibrary", "TensorInfo"]


@dataclass(frozen=True)
class TensorInfo:
    """One model input or output as the program sees it."""

    name: str
    dtype: str
    nbytes: int
    shape: tuple[int, ...] | None = None

    @property
    def c_name(self) -> str:
        """The name as a C identifier (TVM's sanitizing: non-alphanumerics become ``_``)."""
        return re.sub(r"[^0-9A-Za-z_]", "_", self.name)

    def resolved_shape(self) -> tuple[int, ...]:
        """The shape, or the flat element count where the archive gives no shape."""
        if self.shape is not None:
            return self.shape
        return (self.nbytes // np.dtype(self.dtype).itemsize,)


class ModelLibrary:
    """A Model Library Format archive (a ``.tar`` or an extracted directory).

    Parameters
    ----------
    path : str or Path
        The archive written by ``tvm.micro.export_model_library_format``.
    """

    def __init__(self, path: str | Path, read_interface: bool = True) -> None:
        path = Path(path)
        if not path.exists():
            raise MicroBoardError(f"Model Library Format archive {path} does not exist")
        self._tmp = None
        if path.is_dir():
            self.root = path
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="kiln-mlf-")
            self.root = Path(self._tmp.name) / "mlf"
            try:  # refuses links, devices, absolute and '..' names (an archive is data)
                safe_extract(path, self.root)
            except TVMError as err:
                raise MicroBoardError(f"{path} is not a Model Library Format tar: {err}") \
                    from None
        meta_path = self.root / "metadata.json"
        if not meta_path.exists():
            raise MicroBoardError(f"{path}: no metadata.json; not a Model Library Format "
                                  "archive")
        try:
            self.metadata = read_json(meta_path.read_bytes(), "metadata.json")
            modules = self.metadata["modules"]
            self.mod_name, self.module = next(iter(modules.items()))
            executors = self.module["executors"]
        except (TVMError, ValueError, KeyError, StopIteration, AttributeError, TypeError) as err:
            raise MicroBoardError(f"{path}: metadata.json lacks modules/<name>/executors "
                                  f"({err!r})") from None
        # The name goes into file paths, regular expressions and the generated C.
        if not re.fullmatch(r"[A-Za-z0-9_]+", self.mod_name):
            raise MicroBoardError(f"{path}: module name {self.mod_name!r} in metadata.json "
                                  "must be letters, digits and '_'")
        self.executor = executors[0] if executors else ""
        if self.executor not in ("aot", "graph"):
            raise MicroBoardError(f"{path}: executor {self.executor!r}; standalone boards run "
                                  "'aot' or 'graph'")
        self.path = path
        self.sources = sorted((self.root / "codegen" / "host" / "src").glob("*.c"))
        if not self.sources:
            raise MicroBoardError(f"{path}: no generated C in codegen/host/src (build with "
                                  "target 'c' to deploy standalone)")
        self.include_dir = self.root / "codegen" / "host" / "include"
        # AOT pools the application provides: (struct field, bytes, constant?); a constant
        # pool's bytes are the header's <POOL>_CONSTANT_POOL_DATA
        self.external_pools: list[tuple[str, int, bool]] = []
        self.io_in_pools = False  # AOT: I/O inside the pools (tir.usmp.use_workspace_io)
        self.aot_workspace_size = 0  # AOT: TVMBackendAllocWorkspace bytes (0 under USMP)
        self.inputs, self.outputs = [], []
        if not read_interface:  # host-driven: the host learns the I/O over RPC
            return
        try:
            self.inputs, self.outputs = (self._aot_io() if self.executor == "aot"
                                         else self._graph_io())
        except TVMError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError,
                RecursionError) as err:  # a tampered header, JSON or metadata field
            raise MicroBoardError(f"{path}: cannot read the {self.executor} interface: "
                                  f"{type(err).__name__}: {err}") from None

    # -- the C runtime ------------------------------------------------------------------------
    @property
    def crt_dir(self) -> Path:
        """The archive's ``runtime/`` (the standalone CRT), else kiln's own copy."""
        own = self.root / "runtime"
        if (own / "include").is_dir():
            return own
        from kiln.micro import get_standalone_crt_dir

        return Path(get_standalone_crt_dir())

    def crt_config_template(self) -> Path:
        """The ``crt_config.h`` template the archive ships (or the CRT's own)."""
        for candidate in (self.root / "templates" / "crt_config.h.template",
                          self.crt_dir / "template" / "crt_config-template.h"):
            if candidate.exists():
                return candidate
        raise MicroBoardError(f"{self.path}: no crt_config.h template in templates/ or the "
                              "CRT's template/")

    # -- inputs and outputs -------------------------------------------------------------------
    def _main_memory(self) -> dict:
        functions = self.module.get("memory", {}).get("functions", {})
        main = functions.get("main") or [{}]
        return main[0] if isinstance(main, list) else main

    def _declared(self, what: str) -> dict[str, dict]:
        return dict(self._main_memory().get(what, {}) or {})

    def _aot_io(self) -> tuple[list[TensorInfo], list[TensorInfo]]:
        header = self.include_dir / f"tvmgen_{self.mod_name}.h"
        if not header.exists():
            raise MicroBoardError(f"{self.path}: AOT archive without {header.name}; "
                                  "standalone boards need the AOT C interface: "
                                  'Executor("aot", {"interface-api": "c", '
                                  '"unpacked-api": True})')
        text = header.read_text()
        prefix = f"tvmgen_{self.mod_name}"
        if not re.search(rf"int32_t\s+{prefix}_run\s*\(\s*struct\s+{prefix}_", text):
            raise MicroBoardError("standalone boards need the AOT C interface: "
                                  'Executor("aot", {"interface-api": "c", '
                                  '"unpacked-api": True})')
        # Pools the application provides (external), and whether the inputs and outputs
        # live inside them (tir.usmp.use_workspace_io: found through map_inputs/outputs).
        pools = re.search(rf"struct\s+{prefix}_workspace_pools\s*{{(.*?)}}", text, re.S)
        for name in re.findall(r"void\s*\*\s*(\w+)\s*;", pools.group(1) if pools else ""):
            for kind in ("WORKSPACE", "CONSTANT"):
                size = re.search(rf"#define\s+{prefix.upper()}_{name.upper()}_{kind}_POOL_SIZE"
                                 r"\s+(\d+)", text)
                if size is not None:
                    self.external_pools.append((name, int(size.group(1)), kind == "CONSTANT"))
                    break
            else:
                raise MicroBoardError(f"{header.name}: no size macro for pool {name}")
        self.io_in_pools = f"{prefix}_map_inputs" in text
        found = re.search(rf"#define\s+{prefix.upper()}_WORKSPACE_SIZE\s+(\d+)", text)
        self.aot_workspace_size = int(found.group(1)) if found else 0
        sizes = {m.group(1): int(m.group(2)) for m in re.finditer(
            rf"#define\s+{prefix.upper()}_(\w+)_SIZE\s+(\d+)", text)}
        result = []
        for what in ("inputs", "outputs"):
            m = re.search(rf"struct\s+{prefix}_{what}\s*{{(.*?)}}", text, re.S)
            if m is None:
                raise MicroBoardError(f"{header.name} declares no struct {prefix}_{what}")
            fields = re.findall(r"void\s*\*\s*(\w+)\s*;", m.group(1))
            declared = self._declared(what)
            shapes = self._relay_shapes(what, len(fields))
            infos = []
            for position, field in enumerate(fields):
                entry = next((v for k, v in declared.items()
                              if re.sub(r"[^0-9A-Za-z_]", "_", k) == field), {})
                size = sizes.get(field.upper(), entry.get("size"))
                if size is None:
                    raise MicroBoardError(f"{header.name}: no {prefix.upper()}_"
                                          f"{field.upper()}_SIZE for {what[:-1]} {field}")
                shape = entry.get("shape", shapes[position] if shapes else None)
                if shape is not None and int(np.prod(shape, dtype=np.int64)) * \
                        np.dtype(entry.get("dtype", "float32")).itemsize != int(size):
                    shape = None  # a shape that disagrees with the header's size is not it
                infos.append(TensorInfo(field, entry.get("dtype", "float32"), int(size),
                                        tuple(shape) if shape is not None else None))
            result.append(infos)
        return result[0], result[1]

    def _relay_shapes(self, what: str, count: int) -> list[tuple[int, ...]] | None:
        """Input or output shapes of ``main`` from ``src/relay.txt`` (metadata.json has only
        byte sizes); None when the text is absent or does not give ``count`` static shapes."""
        path = self.root / "src" / "relay.txt"
        if not path.exists():
            return None
        if not hasattr(self, "_main_type"):
            from kiln.relay.parser import parse
            from kiln.relay.transform import InferType

            try:
                self._main_type = InferType()(parse(path.read_text()))["main"].checked_type
            except Exception:  # noqa: BLE001 - shapes are a convenience; sizes still hold
                self._main_type = None
        if self._main_type is None:
            return None
        types = (list(self._main_type.arg_types) if what == "inputs"
                 else list(getattr(self._main_type.ret_type, "fields", None)
                           or [self._main_type.ret_type]))
        try:
            shapes = [tuple(int(d) for d in t.shape) for t in types]
        except (TypeError, AttributeError):
            return None
        return shapes if len(shapes) == count else None

    def graph_json(self) -> str:
        """The C graph executor's JSON (``executor-config/graph/*.json``)."""
        found = sorted((self.root / "executor-config" / "graph").glob("*.json"))
        if not found:
            raise MicroBoardError(f"{self.path}: graph archive without "
                                  "executor-config/graph/*.json")
        return found[0].read_text()

    def params_blob(self) -> bytes | None:
        """The parameters blob, or None where the archive has none."""
        found = sorted((self.root / "parameters").glob("*.params"))
        return found[0].read_bytes() if found else None

    @property
    def params_linked(self) -> bool:
        """Whether the generated C holds the parameters (``link-params``: the C graph
        executor finds them through ``_lookup_linked_param`` and must not load the blob)."""
        return any("_lookup_linked_param" in src.read_text(errors="replace")
                   for src in self.sources)

    def _graph_io(self) -> tuple[list[TensorInfo], list[TensorInfo]]:
        try:
            graph = json.loads(self.graph_json())
            nodes, attrs = graph["nodes"], graph["attrs"]
            shapes, dltypes = attrs["shape"][1], attrs["dltype"][1]
            row_ptr = graph.get("node_row_ptr") or list(range(len(nodes) + 1))
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise MicroBoardError(f"{self.path}: malformed graph JSON ({err!r})") from None
        declared_inputs = self._declared("inputs")
        params = set(_param_names(self.params_blob()))

        def info(eid: int, name: str) -> TensorInfo:
            shape = tuple(int(d) for d in shapes[eid])
            dtype = dltypes[eid]
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            return TensorInfo(name, dtype, size, shape)

        inputs = []
        for nid in graph["arg_nodes"]:
            name = nodes[nid]["name"]
            if name in params or (declared_inputs and name not in declared_inputs):
                continue
            inputs.append(info(row_ptr[nid], name))
        outputs = [info(row_ptr[nid] + index, f"output{k}")
                   for k, (nid, index, *_) in enumerate(graph["heads"])]
        return inputs, outputs


def _param_names(blob: bytes | None) -> list[str]:
    """The names in a TVM params blob (the runtime's loader checks every length)."""
    if not blob:
        return []
    try:
        return list(load_param_dict(blob))
    except TVMError as err:
        raise MicroBoardError(f"malformed parameters blob: {err}") from None
