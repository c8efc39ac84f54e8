"""A short run of the CRT loader fuzz campaign (tests/fuzz/crt_loaders.py) in the suite:
mutated graph JSON and params blobs give error codes with messages, never a sanitizer report.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

FUZZ = Path(__file__).resolve().parents[1] / "fuzz" / "crt_loaders.py"


def _campaign():
    spec = importlib.util.spec_from_file_location("crt_loaders", FUZZ)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_crt_loaders_fuzz_smoke(tmp_path):
    totals = _campaign().run(inputs=4000, seed=1, out_dir=tmp_path, chunk=4000, log=lambda _: None)
    for mode in ("graph", "params"):
        counts = totals[mode]
        assert counts["inputs"] == 4000
        # Both outcomes occur: the mutations reach past the parsers into storage and kernels.
        assert counts["accepted"] > 40 and counts["rejected"] > 1000, (mode, counts)
    assert not (tmp_path / "finding.bin").exists()
