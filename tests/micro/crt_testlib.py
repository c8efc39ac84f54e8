"""Build and run the CRT's C test programs (shared by the tests in tests/micro and tests/fuzz)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from kiln.micro import crt_build

C_TEST_DIR = Path(__file__).resolve().parent / "crt"
PLATFORM_TEMPLATE = Path(crt_build.get_standalone_crt_dir()) / "template" / "platform-template.c"

#: crt_config.h of every test program: room for the global registry, a model's system library
#: and an executor module (host-driven microTVM needs all three).
TEST_CONFIG = {"TVM_CRT_MAX_REGISTERED_MODULES": 3}

#: AddressSanitizer + UndefinedBehaviorSanitizer; any finding aborts the program.
SANITIZE = (
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    "-g",
)


def _cache_root() -> Path:
    default = Path(tempfile.gettempdir()) / "kiln-test-cache"
    return Path(os.environ.get("KILN_CACHE_DIR", default)) / "crt-tests"


def crt_objects(flags: Sequence[str], config: Mapping[str, object] = ()) -> dict[str, Path]:
    """Objects of every CRT component built with ``flags`` and ``config``, by source stem.

    Cached by the content of every CRT file, the flags and the config, so the test files
    (and xdist workers) share one build and an edit to any CRT file rebuilds it.
    """
    digest = hashlib.sha256(repr((tuple(flags), sorted(dict(config).items()))).encode())
    for path in sorted(Path(crt_build.get_standalone_crt_dir()).rglob("*.[ch]")):
        digest.update(path.as_posix().encode() + path.read_bytes())
    final = _cache_root() / digest.hexdigest()[:16]
    if not final.is_dir():
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=final.parent))
        crt_build.compile_objects(staging, crt_build.crt_sources(), cflags=flags, config=config)
        try:
            staging.rename(final)
        except OSError:  # another process finished first: use its build
            shutil.rmtree(staging, ignore_errors=True)
    return {p.stem: p for p in final.glob("*.o")}


def build_program(
    out_dir: str | os.PathLike,
    name: str,
    sources: Iterable[str | os.PathLike],
    *,
    components: Sequence[str] = crt_build.COMPONENTS,
    platform: str | os.PathLike | None = PLATFORM_TEMPLATE,
    sanitize: bool = True,
    config: Mapping[str, object] = TEST_CONFIG,
    cflags: Sequence[str] = (),
    generated: Iterable[str | os.PathLike] = (),
) -> Path:
    """Link the CRT components, a platform and ``sources`` into ``out_dir/name/name``.

    ``generated`` sources (kernels from kiln's C codegen) use GNU C and are not held to the
    CRT's warning flags; they are not under test here, so they skip the sanitizers (faster).
    """
    out = Path(out_dir) / name
    flags = (*crt_build.STRICT_CFLAGS, "-O1", *(SANITIZE if sanitize else ()))
    built = crt_objects(flags, config)
    objects = [built[Path(src).stem] for src in crt_build.crt_sources(components)]
    own = list(sources) + ([Path(platform)] if platform is not None else [])
    # Test code may use C11 and extra include directories.
    own_flags = tuple(f for f in flags if f != "-std=c99") + tuple(cflags)
    objects += crt_build.compile_objects(
        out, own, cflags=own_flags, config=config, include=[C_TEST_DIR]
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
