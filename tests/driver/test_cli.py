"""The kiln command line: compile, run, errors, help."""

import subprocess
import sys
import tarfile

import numpy as np
import pytest

from kiln.driver.cli import main, parse_input_shapes

MODEL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 8), float32], %y: Tensor[(2, 8), float32]) {
  %0 = add(%x, %y);
  nn.relu(%0)
}
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "m.rly").write_text(MODEL)
    out = tmp / "m.tar"
    assert main(["compile", str(tmp / "m.rly"), "-o", str(out)]) == 0
    return tmp, out


def test_version_and_help_run_as_a_module():
    out = subprocess.run([sys.executable, "-m", "kiln", "--version"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "kiln 0.1.0"
    helps = subprocess.run([sys.executable, "-m", "kiln", "compile", "--help"],
                           capture_output=True, text=True, check=True).stdout
    assert "--input-shapes" in helps and "--executor" in helps


def test_compile_writes_a_package(package, capsys):
    _, out = package
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["metadata.json", "model.so"]


def test_compile_defaults_to_the_hosts_best_target(package):
    import json

    from kiln.target.codegen_llvm import llvm_available

    _, out = package
    with tarfile.open(out) as tar:
        meta = json.load(tar.extractfile("metadata.json"))
    assert meta["target"] == f"{'llvm' if llvm_available() else 'c'} -mcpu=native"


def test_run_with_inputs_matches_numpy(package, capsys):
    tmp, out = package
    x = np.random.default_rng(0).standard_normal((2, 8)).astype("float32")
    y = np.random.default_rng(1).standard_normal((2, 8)).astype("float32")
    np.savez(tmp / "in.npz", x=x, y=y)
    assert main(["run", str(out), "--inputs", str(tmp / "in.npz"), "--outputs",
                 str(tmp / "out.npz"), "--print-time", "--repeat", "3"]) == 0
    result = np.load(tmp / "out.npz")["output_0"]
    np.testing.assert_allclose(result, np.maximum(x + y, 0))
    assert "time: median" in capsys.readouterr().out


def test_run_with_random_inputs_and_profile(package, capsys):
    _, out = package
    assert main(["run", str(out), "--profile"]) == 0
    text = capsys.readouterr().out
    assert "tvmgen_default_fused_add_nn_relu" in text and "output 0: shape [2, 8]" in text


@pytest.mark.parametrize("argv, message", [
    (["compile", "missing.onnx"], "no such model file"),
    (["compile", "model.xyz"], "no such model file"),
    (["run", "missing.tar"], "no such package"),
])
def test_errors_are_one_line_with_a_hint(argv, message, capsys):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "hint:" in err and "Traceback" not in err


def test_garbage_package_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar file at all")
    assert main(["run", str(bad)]) == 1
    assert "not a readable tar archive" in capsys.readouterr().err


def test_input_shape_parsing():
    assert parse_input_shapes("x:[1,3,224,224] y:[1, 10]") == {"x": [1, 3, 224, 224],
                                                               "y": [1, 10]}
    assert main(["compile", "m.rly", "--input-shapes", "x:[1,a]"]) == 1


def test_vm_package_with_a_tuple_output_runs(tmp_path, capsys):
    (tmp_path / "pair.rly").write_text("""#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) {
  (nn.relu(%x), negative(%x))
}
""")
    out = tmp_path / "pair.tar"
    assert main(["compile", str(tmp_path / "pair.rly"), "--executor", "vm", "-o", str(out)]) == 0
    x = np.random.default_rng(3).standard_normal((2, 3)).astype("float32")
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(out), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                 str(tmp_path / "out.npz")]) == 0
    saved = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(saved["output_0"], np.maximum(x, 0))
    np.testing.assert_allclose(saved["output_1"], -x)
