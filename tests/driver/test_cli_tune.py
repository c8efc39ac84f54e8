"""``kiln tune`` and ``kiln compile --tuning-records`` on a small dense model."""

from __future__ import annotations

import numpy as np

from kiln.autotvm.record import load_from_file
from kiln.driver.cli import main

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 32), float32], %w: Tensor[(16, 32), float32]) {
  %0 = nn.dense(%x, %w, units=None);
  nn.relu(%0)
}
"""


def test_tune_then_compile_with_the_records(tmp_path, capsys):
    model = tmp_path / "dense.rly"
    model.write_text(MODEL)
    log, png = tmp_path / "tune.log", tmp_path / "curve.png"
    assert main(["tune", str(model), "--trials", "3", "--tuner", "random", "--parallel", "2",
                 "--number", "2", "--repeat", "1", "-o", str(log), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "[Task  1/ 1] dense_pack.x86: best" in out and "tuned 1 tasks" in out
    records = list(load_from_file(log))
    assert len(records) == 3 and all(r.error_no == 0 for _, r in records)
    assert png.read_bytes()[:4] == b"\x89PNG"

    package = tmp_path / "dense.tar"
    assert main(["compile", str(model), "--tuning-records", str(log), "-o",
                 str(package)]) == 0
    rng = np.random.default_rng(0)
    x, w = rng.random((2, 32), "float32"), rng.random((16, 32), "float32")
    np.savez(tmp_path / "in.npz", x=x, w=w)
    assert main(["run", str(package), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                 str(tmp_path / "out.npz")]) == 0
    got = next(iter(np.load(tmp_path / "out.npz").values()))
    np.testing.assert_allclose(got, np.maximum(x @ w.T, 0), rtol=1e-5)


def test_tune_and_compile_report_bad_arguments(tmp_path, capsys):
    model = tmp_path / "dense.rly"
    model.write_text(MODEL)
    assert main(["tune", str(model), "--trials", "0"]) == 1
    assert "--trials must be at least 1" in capsys.readouterr().err
    assert main(["compile", str(model), "--tuning-records", str(tmp_path / "none.log")]) == 1
    assert "tuning records" in capsys.readouterr().err


def test_tune_for_a_cortex_m_measures_on_qemu(tmp_path, capsys):
    import shutil

    import pytest

    if shutil.which("qemu-system-arm") is None or shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("needs qemu-system-arm and gcc-arm-none-eabi")
    model = tmp_path / "dense.rly"
    model.write_text(MODEL)
    log = tmp_path / "m4.log"
    target = "c -keys=arm_cpu -mcpu=cortex-m4"
    assert main(["tune", str(model), "--target", target, "--trials", "2", "--tuner", "grid",
                 "--parallel", "2", "-o", str(log)]) == 0
    assert "dense_micro_kernel.arm_cpu: best" in capsys.readouterr().out
    records = list(load_from_file(log))
    assert len(records) == 2 and all(r.error_no == 0 for _, r in records)
    # -icount virtual time: a few thousand instructions at 1 ns each
    assert all(1e-7 < r.costs[0] < 1e-3 for _, r in records)
    assert main(["tune", str(model), "--target", target, "--trials", "1", "--ray", "local",
                 "-o", str(log)]) == 1
    assert "cannot move a device build_func" in capsys.readouterr().err
