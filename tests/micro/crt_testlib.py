"""Build and run the CRT's C test programs (shared by the tests in tests/micro and tests/fuzz)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from kiln.micro import crt_build

C_TEST_DIR = Path(__file__).resolve().parent / "crt"
PLATFORM_TEMPLATE = Path(crt_build.get_standalone_crt_dir()) / "template" / "platform-template.c"

#: AddressSanitizer + UndefinedBehaviorSanitizer; any finding aborts the program.
SANITIZE = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
)


def build_program(
    out_dir: str | os.PathLike,
    name: str,
    sources: Iterable[str | os.PathLike],
    *,
    components: Sequence[str] = crt_build.COMPONENTS,
    platform: str | os.PathLike | None = PLATFORM_TEMPLATE,
    sanitize: bool = True,
    config: Mapping[str, object] = (),
    cflags: Sequence[str] = (),
    generated: Iterable[str | os.PathLike] = (),
) -> Path:
    """Compile the CRT components, a platform and ``sources`` into ``out_dir/name``.

    ``generated`` sources (kernels from kiln's C codegen) use GNU C and are not held to the
    CRT's warning flags; they are not under test here, so they skip the sanitizers (faster).
    """
    out = Path(out_dir) / name
    flags = (*crt_build.STRICT_CFLAGS, "-O1", *(SANITIZE if sanitize else ()), *cflags)
    crt = list(crt_build.crt_sources(components))
    if platform is not None:
        crt.append(Path(platform))
    # Programs built alike in one directory share the CRT objects.
    key = hashlib.sha256(repr((crt, flags, sorted(dict(config).items()))).encode()).hexdigest()
    crt_dir = Path(out_dir) / f"crt-{key[:12]}"
    objects = sorted(crt_dir.glob("*.o")) if (crt_dir / "done").exists() else []
    if not objects:
        objects = crt_build.compile_objects(crt_dir, crt, cflags=flags, config=config)
        (crt_dir / "done").write_text("")
    own_flags = tuple(f for f in flags if f != "-std=c99")  # test code may use C11 bits
    objects += crt_build.compile_objects(
        out, list(sources), cflags=own_flags, config=config, include=[C_TEST_DIR]
    )
    generated = list(generated)
    if generated:
        gen_flags = ("-std=gnu99", "-O1", "-march=native")
        objects += crt_build.compile_objects(
            out / "generated", generated, cflags=gen_flags, config=config
        )
    ldflags = (*(SANITIZE if sanitize else ()), "-lm")
    return crt_build.link_executable(out / name, objects, ldflags=ldflags)


def run_program(exe: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a test program; sanitizer reports make it exit nonzero.

    Leak checking is off: the CRT allocates only from its static pool (tests count live
    blocks through the memory manager instead) and the drivers exit early on errors.
    """
    env = dict(
        os.environ,
        ASAN_OPTIONS="detect_leaks=0",
        UBSAN_OPTIONS="print_stacktrace=1",
    )
    return subprocess.run(
        [os.fspath(exe), *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def system_lib_source(
    function_names: Sequence[str], linked_params: Mapping[int, np.ndarray] | None = None
) -> str:
    """C source of a system library over the kernels ``function_names``.

    It lays the registry out as TVM's codegen does (count, NUL-separated names, final NUL) and
    defines ``TVMSystemLibEntryPoint``; with ``linked_params`` ({storage id: array}) it also
    defines ``_lookup_linked_param`` returning each array's address, as link-params builds do.
    Test-local stand-in until the system-lib codegen lands.
    """
    names = list(function_names)
    lines = ["#include <tvm/runtime/crt/module.h>", ""]
    for name in names:
        lines.append(f"int32_t {name}(TVMValue*, int*, int, TVMValue*, int*, void*);")
    if linked_params is not None:
        names.append("_lookup_linked_param")
        for sid, array in sorted(linked_params.items()):
            data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
            body = ", ".join(str(b) for b in data) or "0"
            lines.append(
                f"static const uint8_t linked_param_{sid}[] __attribute__((aligned(16))) = "
                f"{{{body}}};"
            )
        cases = "".join(
            f"    case {sid}: ret->v_handle = (void*)linked_param_{sid}; break;\n"
            for sid in sorted(linked_params)
        )
        lines.append(
            "static int32_t _lookup_linked_param(TVMValue* args, int* codes, int n,\n"
            "                                    TVMValue* ret, int* ret_code, void* rh) {\n"
            "  (void)codes; (void)n; (void)rh;\n"
            "  *ret_code = kTVMOpaqueHandle;\n"
            "  switch (args[0].v_int64) {\n"
            f"{cases}"
            "    default: ret->v_handle = NULL; break;\n"
            "  }\n"
            "  return 0;\n"
            "}"
        )
    count = len(names)
    blob = f'"\\{count & 0xFF:03o}\\{count >> 8:03o}" ' + " ".join(
        f'"{name}" "\\0"' for name in names
    )
    lines += [
        "static const TVMBackendPackedCFunc funcs[] = {"
        + ", ".join(f"&{name}" for name in names)
        + "};",
        f"static const TVMFuncRegistry registry = {{{blob}, funcs}};",
        "static const TVMModule system_lib = {&registry};",
        "const TVMModule* TVMSystemLibEntryPoint(void) { return &system_lib; }",
        "",
    ]
    return "\n".join(lines)
