"""The runtime support library can be built in the background while a build lowers kernels."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = r"""
import json, time
from kiln.runtime import cc, native

compiles = []
run = cc.run_compiler
def counting(cmd, what):
    if any(str(arg).endswith("graph_executor.c") for arg in cmd):
        compiles.append(time.perf_counter())
    return run(cmd, what)
cc.run_compiler = counting

native.prefetch_runtime_lib()
native.prefetch_runtime_lib()  # already on its way: starts nothing more
lib = native.load_runtime_lib()  # waits for the background build
from kiln.runtime import packed_func
print(json.dumps({"compiles": len(compiles), "same": lib is packed_func.runtime_library(),
                  "error": packed_func.get_last_error()}))
"""


def test_prefetch_builds_the_runtime_once_and_load_waits_for_it(tmp_path):
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path), "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"compiles": 1, "same": True, "error": ""}
    assert len(list((tmp_path / "cc").glob("lib_*.so"))) == 1
