"""A short fuzz run of every loader (the long campaigns run with ``python -m tests.fuzz``).

Each loader gets a few hundred mutated inputs (a few dozen for module archives, which
compile) in a worker process; any crash, hang or exception other than a TVMError fails.
"""

from __future__ import annotations

import pytest

from .campaign import run_campaign, run_inputs
from .targets import TARGETS

SMOKE_INPUTS = {"module_archive": 40, "model_library_format": 60, "graph_json": 150,
                "vm_executable": 150, "onnx": 150, "tflite": 2000}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_loader_survives_a_short_fuzz_run(name, tmp_path):
    stats = run_campaign(name, inputs=SMOKE_INPUTS.get(name, 300), seed=1, out_dir=tmp_path)
    findings = "\n".join(f"  {path}: {summary}" for path, summary in stats.findings)
    assert stats.clean, f"{stats.line()}\n{findings}"
    assert stats.counts["tvm"] > 0  # the mutants did reach the loader's checks


def test_the_harness_tells_crashes_hangs_and_bare_exceptions_apart(tmp_path):
    inputs = [b"ok", b"bad", b"crash", b"ok", b"hang", b"ok", b"bare", b"ok"]
    stats = run_inputs("selftest", inputs, out_dir=tmp_path)
    assert dict(stats.counts) == {"ok": 4, "tvm": 1, "crash": 1, "hang": 1, "bare": 1}
    recorded = sorted(p.name.split("-")[0] for p in (tmp_path / "selftest").glob("*.bin"))
    assert recorded == ["bare", "crash", "hang"]
    assert "KeyError" in next((tmp_path / "selftest").glob("bare-*.txt")).read_text()
