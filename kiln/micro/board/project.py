"""Build a Model Library Format archive and the C runtime into a standalone board program.

Entry points: :class:`StandaloneProject`, :func:`build_standalone`, :func:`model_glue`.

The program is ``main.c`` + ``platform.c`` (board-independent, ``src/common``), the board's
own code, the CRT (``common``, ``memory``, plus ``graph_executor`` for graph archives), the
archive's generated C, and a generated ``kiln_model.c`` that connects them: for AOT it fills
``struct tvmgen_<mod>_inputs/outputs`` and calls ``tvmgen_<mod>_run``; for the graph
executor it embeds the graph JSON (and the params blob unless the params are linked), gets
``runtime.SystemLib`` and drives ``TVMGraphExecutor_*``. AOT archives with external pools and
``tir.usmp.use_workspace_io`` are supported: the glue provides the pools and the program reads
its inputs straight into them. With ``io="console"`` inputs and outputs travel over the
UART (stdin/stdout on the host); with ``io="linked"`` the inputs are compiled into the image
and the outputs return over the UART.

Example
-------
>>> project = build_standalone("model.tar", "qemu-cortex-m4")      # doctest: +SKIP
>>> result = project.run({"x": x})                                  # doctest: +SKIP
>>> result.outputs[0], result.instructions                          # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from kiln.micro.board.base import Board, MicroBoardError, RunResult, SourceGroup, source_dir
from kiln.micro.board.library import ModelLibrary, TensorInfo

__all__ = ["StandaloneProject", "build_standalone", "model_glue"]

_DL_TYPE_CODES = {"i": "kDLInt", "u": "kDLUInt", "f": "kDLFloat", "b": "kDLUInt"}
_IO_DEFINES = {"files": {}, "linked": {"KILN_LINKED_IO": "1"},
               "console": {"KILN_CONSOLE_IO": "1"}}
_CRT_PARTS = {"aot": ("common", "memory"), "graph": ("common", "memory", "graph_executor")}
#: A host-driven program serves any executor over RPC.
_RPC_CRT_PARTS = ("common", "memory", "graph_executor", "graph_executor_module", "aot_executor",
                  "aot_executor_module", "microtvm_rpc_common", "microtvm_rpc_server")
EXECUTIONS = ("standalone", "host-driven")


def _c_bytes(data: bytes, per_line: int = 64) -> str:
    """``data`` as a C string literal (three-digit octal escapes, so no escape swallows the
    next character); gcc reads these far faster than a brace list of numbers."""
    rows = ["".join(f"\\{b:03o}" for b in data[i:i + per_line])
            for i in range(0, len(data), per_line)]
    return "\n  ".join(f'"{row}"' for row in rows) if rows else '""'


def _buffers(infos: Sequence[TensorInfo], kind: str, in_pool: bool = False) -> list[str]:
    """The I/O buffers and the tables main.c reads; with ``in_pool`` the pointers are filled
    by kiln_model_prepare from the pools instead."""
    lines = []
    if not in_pool:
        for i, t in enumerate(infos):
            lines.append(f"static uint8_t kiln_{kind}_{i}[{max(t.nbytes, 1)}] "
                         f"__attribute__((aligned(16), section(\".bss.noinit.kiln_io\")));"
                         f"  /* {t.name}: {t.dtype} */")
    names = ", ".join("0" if in_pool else f"kiln_{kind}_{i}" for i in range(len(infos)))
    sizes = ", ".join(str(t.nbytes) for t in infos) or "0"
    lines += [f"const int kiln_num_{kind}s = {len(infos)};",
              f"void* kiln_{kind}_data[] = {{{names or '0'}}};",
              f"const size_t kiln_{kind}_bytes[] = {{{sizes}}};"]
    return lines


def _aot_glue(lib: ModelLibrary) -> list[str]:
    prefix = f"tvmgen_{lib.mod_name}"
    lines = [f'#include "{prefix}.h"', "",
             *_buffers(lib.inputs, "input", lib.io_in_pools),
             *_buffers(lib.outputs, "output", lib.io_in_pools)]
    for name, size, constant in lib.external_pools:
        if constant:  # in flash, filled from the header's data macro
            lines.append(f"static const uint8_t kiln_pool_{name}[{size}] "
                         f"__attribute__((aligned(16))) = "
                         f"{{{prefix.upper()}_{name.upper()}_CONSTANT_POOL_DATA}};")
        else:
            lines.append(f"static uint8_t kiln_pool_{name}[{size}] __attribute__((aligned(16), "
                         f"section(\".bss.noinit.tvm\")));")
    pools = ", ".join(f".{name} = (void*)kiln_pool_{name}" for name, *_ in lib.external_pools)
    if lib.external_pools:
        lines.append(f"static struct {prefix}_workspace_pools kiln_pools = {{{pools}}};")
    lines += ["", "int kiln_model_prepare(void) {"]
    if lib.io_in_pools:
        lines += [f"  struct {prefix}_inputs inputs = {prefix}_map_inputs(&kiln_pools);",
                  f"  struct {prefix}_outputs outputs = {prefix}_map_outputs(&kiln_pools);"]
        lines += [f"  kiln_input_data[{i}] = inputs.{t.c_name};"
                  for i, t in enumerate(lib.inputs)]
        lines += [f"  kiln_output_data[{i}] = outputs.{t.c_name};"
                  for i, t in enumerate(lib.outputs)]
    lines += ["  return 0;", "}", "", "int kiln_model_init(void) { return 0; }", "",
              "int kiln_model_run(void) {"]
    if lib.io_in_pools:
        lines.append(f"  return {prefix}_run(&kiln_pools);")
    else:
        ins = ", ".join(f".{t.c_name} = kiln_input_{i}" for i, t in enumerate(lib.inputs))
        outs = ", ".join(f".{t.c_name} = kiln_output_{i}" for i, t in enumerate(lib.outputs))
        args = "&inputs, &outputs" + (", &kiln_pools" if lib.external_pools else "")
        lines += [f"  struct {prefix}_inputs inputs = {{{ins}}};",
                  f"  struct {prefix}_outputs outputs = {{{outs}}};",
                  f"  return {prefix}_run({args});"]
    return [*lines, "}", "", "int kiln_model_finish(void) { return 0; }"]


def _dl_tensor(t: TensorInfo, data: str, var: str) -> list[str]:
    dtype = np.dtype(t.dtype)
    code = _DL_TYPE_CODES[dtype.kind]
    shape = ", ".join(str(d) for d in t.resolved_shape()) or "1"
    return [f"  static int64_t {var}_shape[] = {{{shape}}};",
            f"  DLTensor {var} = {{{data}, {{kDLCPU, 0}}, {len(t.resolved_shape())}, "
            f"{{{code}, {dtype.itemsize * 8}, 1}}, {var}_shape, NULL, 0}};"]


def _graph_glue(lib: ModelLibrary) -> list[str]:
    graph = lib.graph_json().encode()  # the literal adds the terminating NUL
    params = None if lib.params_linked else lib.params_blob()
    lines = ["#include <dlpack/dlpack.h>", "#include <tvm/runtime/crt/crt.h>",
             "#include <tvm/runtime/crt/graph_executor.h>",
             "#include <tvm/runtime/crt/packed_func.h>", "",
             *_buffers(lib.inputs, "input"), *_buffers(lib.outputs, "output"), "",
             "int kiln_model_prepare(void) { return 0; }", "",
             f"static const char kiln_graph_json[{len(graph) + 1}] =\n  {_c_bytes(graph)};"]
    if params is not None:  # exactly len(params) bytes: C drops the literal's NUL
        lines.append(f"static const char kiln_params[{len(params)}] "
                     f"__attribute__((aligned(8))) =\n  {_c_bytes(params)};")
    lines += ["static TVMGraphExecutor* g_executor;", "",
              "int kiln_model_init(void) {",
              "  int err = TVMInitializeRuntime();",
              "  if (err != 0) return err;",
              "  TVMArgs no_args = TVMArgs_Create(NULL, NULL, 0);",
              "  TVMPackedFunc system_lib;",
              '  err = TVMPackedFunc_InitGlobalFunc(&system_lib, "runtime.SystemLib", '
              "&no_args);",
              "  if (err != 0) return err;",
              "  err = TVMPackedFunc_Call(&system_lib);",
              "  if (err != 0) return err;",
              "  TVMModuleHandle module = TVMArgs_AsModuleHandle(&system_lib.ret_value, 0);",
              "  DLDevice device = {kDLCPU, 0};",
              "  err = TVMGraphExecutor_Create(kiln_graph_json, module, &device, &g_executor);",
              "  if (err != 0) return err;"]
    if params is not None:
        lines += ["  err = TVMGraphExecutor_LoadParams(g_executor, kiln_params, "
                  "sizeof(kiln_params));", "  if (err != 0) return err;"]
    for i, t in enumerate(lib.inputs):
        lines += [*_dl_tensor(t, f"kiln_input_{i}", f"in{i}"),
                  f'  err = TVMGraphExecutor_SetInput(g_executor, "{t.name}", &in{i});',
                  "  if (err != 0) return err;"]
    lines += ["  return 0;", "}", "",
              "int kiln_model_run(void) { return TVMGraphExecutor_Run(g_executor); }", "",
              "int kiln_model_finish(void) {", "  int err = 0;"]
    for i, t in enumerate(lib.outputs):
        lines += [*_dl_tensor(t, f"kiln_output_{i}", f"out{i}"),
                  f"  err = TVMGraphExecutor_GetOutput(g_executor, {i}, &out{i});",
                  "  if (err != 0) return err;"]
    lines += ["  return err;", "}"]
    return lines


def model_glue(lib: ModelLibrary) -> str:
    """The C source that connects ``main.c`` to the archive's executor (``kiln_model.h``)."""
    body = _aot_glue(lib) if lib.executor == "aot" else _graph_glue(lib)
    head = [f"/* Generated by kiln.micro.board for {lib.path.name} "
            f"({lib.executor} executor). */",
            "#include <stddef.h>", "#include <stdint.h>", '#include "kiln_model.h"']
    return "\n".join([*head, *body]) + "\n"


class StandaloneProject:
    """A Model Library Format archive built into a program for one board.

    Parameters
    ----------
    mlf : str or Path
        The archive (``.tar`` or extracted directory).
    board : Board or str
        A :class:`~kiln.micro.board.Board` or its name (``"host"``, ``"qemu-cortex-m4"``,
        ``"qemu-cortex-m7"``).
    build_dir : str or Path, optional
        Where the program is built; a temporary directory by default.
    workspace_bytes : int, optional
        The platform memory pool (``TVMPlatformMemoryAllocate``): the C graph executor's
        tensors and, for AOT without USMP, the kernels' workspaces. By default 512 KiB for
        the graph executor (plus twice the params blob when the params are not linked), and
        for AOT the archive's ``TVMGEN_<MOD>_WORKSPACE_SIZE`` plus the stack allocator's
        alignment slack (a few bytes under USMP, which plans everything into its own pool).
    repeat : int
        Runs of the model per program start; the last one's ticks are reported.
    defines : mapping, optional
        Extra ``-D`` definitions, e.g. CRT limits such as ``TVM_CRT_MAX_ARGS``.
    io : str
        ``"files"``: the program reads inputs from and writes outputs to files (host files,
        or semihosting on the Cortex-M), so one build serves any inputs. ``"console"``: the
        inputs are sent over the console (the UART; stdin on the host) after the program
        asks for them, and the outputs come back there. ``"linked"``: each run compiles its
        inputs into the image and the outputs come back over the console, as a deployed
        program without any host link would hold them.
    execution : str
        ``"standalone"``: the program runs the model once by itself (``run``).
        ``"host-driven"``: the program is microTVM's RPC server over the console link
        (``rpc_main.c``) with the model's system library; the host drives it through
        ``tvm.micro.Session`` (the archive must be built with ``Runtime("crt",
        {"system-lib": True})``).
    """

    def __init__(self, mlf: str | Path | ModelLibrary, board: Board | str,
                 build_dir: str | Path | None = None, workspace_bytes: int | None = None,
                 repeat: int = 1, defines: Mapping[str, str] | None = None,
                 io: str = "files", execution: str = "standalone") -> None:
        from kiln.micro.board import get_board

        if execution not in EXECUTIONS:
            raise MicroBoardError(f"execution must be one of {EXECUTIONS}, got {execution!r}")
        self.execution = execution
        self.library = mlf if isinstance(mlf, ModelLibrary) else ModelLibrary(
            mlf, read_interface=execution == "standalone")
        self.board = get_board(board) if isinstance(board, str) else board
        self._tmp = None
        if build_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"kiln-{self.board.name}-build-")
            build_dir = self._tmp.name
        self.build_dir = Path(build_dir)
        if workspace_bytes is None:
            workspace_bytes = self.library.aot_workspace_size + 64
            # Host-driven programs allocate what the host asks for over RPC.
            if self.library.executor == "graph" or execution == "host-driven":
                # Unlinked params live in the executor's storage, and LoadParams holds one
                # more copy of a param while it loads it: twice the blob is always enough.
                params = None if self.library.params_linked else self.library.params_blob()
                workspace_bytes = 512 * 1024 + 2 * len(params or b"")
        self.workspace_bytes = int(workspace_bytes)
        self.repeat = int(repeat)
        self.defines = dict(defines or {})
        if io not in _IO_DEFINES:
            raise MicroBoardError(f"io must be one of {sorted(_IO_DEFINES)}, got {io!r}")
        self.io = io
        self.defines.update(_IO_DEFINES[io])
        self.program: Path | None = None

    @property
    def inputs(self) -> list[TensorInfo]:
        return self.library.inputs

    @property
    def outputs(self) -> list[TensorInfo]:
        return self.library.outputs

    def source_groups(self) -> list[SourceGroup]:
        """The program's C apart from the board's own: the runtime (the CRT, ``main.c``,
        ``platform.c``; shared by every model) and the model (generated C + glue)."""
        crt = self.library.crt_dir
        crt_src = crt / "src" / "runtime" / "crt"
        host_driven = self.execution == "host-driven"
        parts = _RPC_CRT_PARTS if host_driven else _CRT_PARTS[self.library.executor]
        crt_files = [f for part in parts for f in sorted((crt_src / part).glob("*.c"))]
        if not crt_files:
            raise MicroBoardError(f"no CRT sources under {crt_src}")
        common = source_dir() / "common"
        config_dir = self.build_dir / "crt_config"
        runtime_includes = [config_dir, common, crt / "include", crt_src / "include"]
        defines = {"KILN_WORKSPACE_BYTES": str(self.workspace_bytes),
                   "KILN_REPEAT": str(self.repeat), **self.defines}
        # AOT frees in LIFO order (stack allocator); RPC clients free in any order.
        if self.library.executor == "aot" and not host_driven:
            defines["KILN_ALLOCATOR_STACK"] = "1"
        if host_driven:  # the global registry, the system library and an executor module
            defines.setdefault("TVM_CRT_MAX_REGISTERED_MODULES", "3")
        main = common / ("rpc_main.c" if host_driven else "main.c")
        runtime = SourceGroup.of([main, common / "platform.c", *crt_files],
                                 runtime_includes, defines)
        glue = [] if host_driven else [self.build_dir / "kiln_model.c"]
        model = SourceGroup.of([*self.library.sources, *glue],
                               [*runtime_includes, self.library.include_dir], defines)
        groups = [runtime, model]
        if self.io == "linked":
            groups.append(SourceGroup.of([self.build_dir / "kiln_inputs.c"]))
        return groups

    def build(self) -> Path:
        """Generate the glue, compile and link; return the program's path."""
        self.build_dir.mkdir(parents=True, exist_ok=True)
        config_dir = self.build_dir / "crt_config"
        config_dir.mkdir(exist_ok=True)
        shutil.copyfile(self.library.crt_config_template(), config_dir / "crt_config.h")
        if self.execution == "standalone":
            (self.build_dir / "kiln_model.c").write_text(model_glue(self.library))
        if self.io == "linked" and not (self.build_dir / "kiln_inputs.c").exists():
            self._write_inputs([np.zeros(t.nbytes, "uint8") for t in self.inputs])
        self.program = self.board.build(self.source_groups(), self.build_dir)
        return self.program

    def _write_inputs(self, arrays: Sequence[np.ndarray]) -> None:
        """``kiln_inputs.c``: the inputs as constant arrays (``KILN_LINKED_IO``)."""
        lines = ["/* Generated by kiln.micro.board: inputs linked into the image. */",
                 "#include <stdint.h>"]
        for i, array in enumerate(arrays):
            data = np.ascontiguousarray(array).tobytes()
            lines.append(f"static const uint8_t kiln_linked_input_{i}[{max(len(data), 1)}] "
                         f"__attribute__((aligned(16))) =\n  {_c_bytes(data)};")
        names = ", ".join(f"kiln_linked_input_{i}" for i in range(len(arrays))) or "0"
        lines.append(f"const uint8_t* const kiln_linked_inputs[] = {{{names}}};")
        (self.build_dir / "kiln_inputs.c").write_text("\n".join(lines) + "\n")

    def _ordered_inputs(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
                        ) -> list[np.ndarray]:
        if isinstance(inputs, Mapping):
            names = [t.name for t in self.inputs]
            unknown = sorted(set(inputs) - set(names) - {t.c_name for t in self.inputs})
            if unknown:
                raise MicroBoardError(f"Could not find {unknown[0]!r} in the model's inputs "
                                      f"{names}")
            values = []
            for t in self.inputs:
                value = inputs.get(t.name, inputs.get(t.c_name))
                if value is None:
                    raise MicroBoardError(f"input {t.name!r} is missing")
                values.append(value)
        else:
            values = list(inputs)
            if len(values) != len(self.inputs):
                raise MicroBoardError(f"the model takes {len(self.inputs)} inputs, got "
                                      f"{len(values)}")
        arrays = []
        for t, value in zip(self.inputs, values):
            array = np.ascontiguousarray(value)
            if array.dtype != np.dtype(t.dtype) or array.nbytes != t.nbytes:
                raise MicroBoardError(f"input {t.name!r} must be {t.dtype} of {t.nbytes} "
                                      f"bytes (shape {t.shape}), got {array.dtype} "
                                      f"{array.shape}")
            arrays.append(array)
        return arrays

    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray],
            timeout: float | None = None) -> RunResult:
        """Run the program once on ``inputs`` (by name, or in order); building it first if
        needed. Outputs come back in the model's output order."""
        arrays = self._ordered_inputs(inputs)
        if self.program is None:
            self.build()
        if self.io == "linked":  # only kiln_inputs.c compiles again; the rest is cached
            self._write_inputs(arrays)
            self.program = self.board.build(self.source_groups(), self.build_dir)
        return self.board.run(self.program, arrays,
                              [(t.resolved_shape(), t.dtype) for t in self.outputs], timeout,
                              console_outputs=self.io != "files",
                              console_inputs=self.io == "console")


def build_standalone(mlf: str | Path, board: Board | str, build_dir: str | Path | None = None,
                     **options) -> StandaloneProject:
    """Build ``mlf`` for ``board`` (see :class:`StandaloneProject` for ``options``)."""
    project = StandaloneProject(mlf, board, build_dir, **options)
    project.build()
    return project
