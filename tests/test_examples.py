"""The README's main job: examples/quickstart.py compiles, runs and checks its model."""

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_runs_and_matches_the_reference():
    out = subprocess.run([sys.executable, str(EXAMPLES / "quickstart.py")], capture_output=True,
                         text=True, timeout=600, check=True).stdout
    assert "predicted class:" in out and "inference: median" in out
    error = float(out.split("max |kiln - reference| = ")[1].split(")")[0])
    assert error < 1e-5
