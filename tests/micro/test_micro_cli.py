"""``kiln micro project generate|build|flash|run`` on the crt template: the outputs printed
and saved equal NumPy's, bad options and directories are clear errors, nothing keeps running.
"""

from __future__ import annotations

import numpy as np

import kiln as tvm
from kiln import relay
from kiln.driver.cli import main
from kiln.relay.backend import Executor, Runtime


def test_project_commands_run_the_model(tmp_path, capsys):
    x = relay.var("x", shape=(2, 3), dtype="float32")
    y = relay.var("y", shape=(2, 3), dtype="float32")
    func = relay.Function([x, y], relay.multiply(relay.add(x, y), x))
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        module = relay.build(tvm.IRModule.from_expr(func), target="c",
                             runtime=Runtime("crt", {"system-lib": True}),
                             executor=Executor("graph"))
    tvm.micro.export_model_library_format(module, tmp_path / "model.tar")
    rng = np.random.default_rng(3)
    data = {"x": rng.random((2, 3), "float32"), "y": rng.random((2, 3), "float32")}
    np.savez(tmp_path / "in.npz", **data)
    project = str(tmp_path / "project")
    assert main(["micro", "project", "generate", str(tmp_path / "model.tar"), project,
                 "--template", "crt", "-o", "verbose=false"]) == 0
    assert main(["micro", "project", "build", project]) == 0
    assert main(["micro", "project", "flash", project]) == 0
    assert main(["micro", "project", "run", project, "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    out = np.load(tmp_path / "out.npz")["arr_0"]
    np.testing.assert_allclose(out, (data["x"] + data["y"]) * data["x"], rtol=1e-6)
    capsys.readouterr()
    assert main(["micro", "project", "build", project, "-o", "colour=red"]) == 1
    assert "unknown project option 'colour'" in capsys.readouterr().err
    assert main(["micro", "project", "build", project, "-o", "verbose=maybe"]) == 1
    assert "is a bool" in capsys.readouterr().err
    assert main(["micro", "project", "run", str(tmp_path)]) == 1
    assert "is not a generated microTVM project" in capsys.readouterr().err
    # The same archive as a standalone program (the model runs by itself, I/O through files).
    standalone = str(tmp_path / "standalone")
    assert main(["micro", "project", "generate", str(tmp_path / "model.tar"), standalone,
                 "-o", "execution=standalone"]) == 0
    assert main(["micro", "project", "build", standalone]) == 0
    assert main(["micro", "project", "run", standalone, "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out2.npz")]) == 0
    out = np.load(tmp_path / "out2.npz")["arr_0"]
    np.testing.assert_allclose(out, (data["x"] + data["y"]) * data["x"], rtol=1e-6)
