"""Real models defined in PyTorch, exported to ONNX, converted by from_onnx and run on the
reference interpreter; PyTorch's own outputs are the oracle (within 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from onnx_frontend_helpers import evaluate_main  # noqa: E402

from kiln.relay.frontend import from_onnx  # noqa: E402


def _export(model, example, path, input_names, output_names, dynamic_axes=None):
    model.eval()
    torch.onnx.export(model, example, str(path), input_names=input_names,
                      output_names=output_names, dynamo=False, opset_version=17,
                      dynamic_axes=dynamic_axes)


def _run_kiln(path, inputs: dict, **kwargs):
    mod, params = from_onnx(str(path), shape={k: v.shape for k, v in inputs.items()}, **kwargs)
    args = list(inputs.values()) + [params[p.name_hint].numpy()
                                    for p in mod["main"].params[len(inputs):]]
    return evaluate_main(mod, *args)


def _torch_outputs(model, example):
    with torch.no_grad():
        out = model(*example)
    out = out if isinstance(out, tuple) else (out,)
    flat = []
    for o in out:
        flat.extend(o if isinstance(o, tuple) else (o,))
    return [o.numpy() for o in flat]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                                    nn.Linear(32, 4))

    def forward(self, x):
        return torch.softmax(self.layers(x), dim=-1)


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), nn.BatchNorm2d(16),
            nn.LeakyReLU(0.1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.body(x)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.BatchNorm2d(8), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(8, 8, 1), BasicBlock(8, 16, 2),
                                    BasicBlock(16, 16, 1))
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32,
                                                dropout=0.0, batch_first=True)

    def forward(self, x, mask):
        return self.layer(x, src_mask=mask)


class SequenceModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 12, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = nn.GRU(24, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        out, h = self.gru(out)
        return self.head(out[:, -1]), h


def _randomize_bn(model):
    gen = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)


@pytest.mark.parametrize("freeze_params", [True, False])
def test_mlp_matches_pytorch(tmp_path, freeze_params):
    torch.manual_seed(0)
    model = MLP()
    x = torch.randn(3, 16)
    _export(model, (x,), tmp_path / "mlp.onnx", ["x"], ["y"])
    got = _run_kiln(tmp_path / "mlp.onnx", {"x": x.numpy()}, freeze_params=freeze_params)
    np.testing.assert_allclose(got[0], _torch_outputs(model, (x,))[0], rtol=1e-4, atol=1e-4)


def test_cnn_with_batchnorm_matches_pytorch(tmp_path):
    torch.manual_seed(1)
    model = ConvBN()
    _randomize_bn(model)
    x = torch.randn(2, 3, 16, 16)
    _export(model, (x,), tmp_path / "cnn.onnx", ["x"], ["y"])
    got = _run_kiln(tmp_path / "cnn.onnx", {"x": x.numpy()})
    np.testing.assert_allclose(got[0], _torch_outputs(model, (x,))[0], rtol=1e-4, atol=1e-4)


def test_resnet_blocks_match_pytorch(tmp_path):
    torch.manual_seed(2)
    model = SmallResNet()
    _randomize_bn(model)
    x = torch.randn(1, 3, 12, 12)
    _export(model, (x,), tmp_path / "resnet.onnx", ["x"], ["y"],
            dynamic_axes={"x": {0: "batch"}})
    got = _run_kiln(tmp_path / "resnet.onnx", {"x": x.numpy()})
    np.testing.assert_allclose(got[0], _torch_outputs(model, (x,))[0], rtol=1e-4, atol=1e-4)


def test_transformer_encoder_with_mask_matches_pytorch(tmp_path):
    torch.manual_seed(3)
    model = Encoder()
    x = torch.randn(2, 5, 16)
    mask = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
    _export(model, (x, mask), tmp_path / "encoder.onnx", ["x", "mask"], ["y"])
    got = _run_kiln(tmp_path / "encoder.onnx", {"x": x.numpy(), "mask": mask.numpy()})
    np.testing.assert_allclose(got[0], _torch_outputs(model, (x, mask))[0], rtol=1e-4,
                               atol=1e-4)


def test_lstm_gru_sequence_model_matches_pytorch(tmp_path):
    torch.manual_seed(4)
    model = SequenceModel()
    x = torch.randn(2, 6, 8)
    _export(model, (x,), tmp_path / "seq.onnx", ["x"], ["y", "h"])
    got = _run_kiln(tmp_path / "seq.onnx", {"x": x.numpy()})
    for a, b in zip(got, _torch_outputs(model, (x,))):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_mlp_with_symbolic_batch_runs_without_pinning(tmp_path):
    torch.manual_seed(5)
    model = MLP()
    x = torch.randn(5, 16)
    _export(model, (x,), tmp_path / "mlp_any.onnx", ["x"], ["y"],
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    mod, _ = from_onnx(str(tmp_path / "mlp_any.onnx"))
    assert str(mod["main"].checked_type.ret_type) == "Tensor[(?, 4), float32]"
    got = evaluate_main(mod, x.numpy())[0]
    np.testing.assert_allclose(got, _torch_outputs(model, (x,))[0], rtol=1e-4, atol=1e-4)
