"""``kiln compile model.tflite`` then ``kiln run``: the same answer as LiteRT."""

import numpy as np
import pytest

from kiln.driver.cli import main
from kiln.relay.testing.tflite import TFLiteModelBuilder

litert = pytest.importorskip("ai_edge_litert.interpreter")
pytest.importorskip("tflite")


def test_compile_and_run_a_tflite_model(tmp_path):
    rng = np.random.default_rng(0)
    b = TFLiteModelBuilder()
    x = b.add_input("x", (1, 8))
    h = b.add_tensor("h", (1, 4))
    b.add_operator("FULLY_CONNECTED", [x, b.add_const("w", rng.standard_normal((4, 8)), "float32"),
                                       b.add_const("b", rng.standard_normal(4), "float32")], [h],
                   "FullyConnectedOptions", FusedActivationFunction=1)
    b.add_output(h)
    (tmp_path / "m.tflite").write_bytes(b.finish())
    assert main(["compile", str(tmp_path / "m.tflite"), "--input-shapes", "x:[1,8]",
                 "-o", str(tmp_path / "m.tar")]) == 0
    value = rng.standard_normal((1, 8)).astype("float32")
    np.savez(tmp_path / "in.npz", x=value)
    assert main(["run", str(tmp_path / "m.tar"), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    interp = litert.Interpreter(model_content=(tmp_path / "m.tflite").read_bytes())
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], value)
    interp.invoke()
    expected = interp.get_tensor(interp.get_output_details()[0]["index"])
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["output_0"], expected, atol=1e-5)
