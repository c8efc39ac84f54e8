"""relay.quantize on a real task: a small CNN trained on scikit-learn's 8x8 digits keeps its
top-1 accuracy within one point after int8 post-training quantization."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay
from kiln.contrib import graph_executor

torch = pytest.importorskip("torch")
datasets = pytest.importorskip("sklearn.datasets")


@pytest.fixture(scope="module")
def digits_cnn():
    return train_digits_cnn()


def train_digits_cnn():
    """(float Relay module, params, images, labels, train and test indices), trained here in a
    few seconds."""
    torch.manual_seed(0)
    torch.set_num_threads(1)   # the suite shares two cores
    digits = datasets.load_digits()
    images = (digits.images / 16.0).astype("float32")[:, None]       # N, 1, 8, 8 in [0, 1]
    labels = digits.target
    order = np.random.default_rng(0).permutation(len(labels))
    train, test = order[:1400], order[1400:]
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = torch.from_numpy(images[train]), torch.from_numpy(labels[train])
    for _ in range(25):
        for i in range(0, len(train), 200):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[i:i + 200]), y[i:i + 200]).backward()
            opt.step()
    w = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    # one batch holds the whole test split, so accuracy is one run
    data = relay.var("data", shape=(len(test), 1, 8, 8))
    h = data
    for i in range(2):
        h = relay.nn.conv2d(h, relay.var(f"w{i}"), padding=(1, 1), channels=(8, 16)[i],
                            kernel_size=(3, 3))
        h = relay.nn.max_pool2d(relay.nn.relu(relay.nn.bias_add(h, relay.var(f"b{i}"))),
                                pool_size=(2, 2), strides=(2, 2))
    h = relay.nn.bias_add(relay.nn.dense(relay.nn.batch_flatten(h), relay.var("fw")),
                          relay.var("fb"))
    func = relay.Function(relay.analysis.free_vars(h), h)
    params = {"w0": w["0.weight"], "b0": w["0.bias"], "w1": w["3.weight"], "b1": w["3.bias"],
              "fw": w["7.weight"], "fb": w["7.bias"]}
    mod = kiln.IRModule.from_expr(func)
    return mod, params, images, labels, train, test


def accuracy(mod, params, images, labels):
    with kiln.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    m = graph_executor.GraphModule(lib["default"](kiln.cpu()))
    m.set_input("data", images)
    m.run()
    return 100.0 * float(np.mean(np.argmax(m.get_output(0).numpy(), axis=1) == labels))


@pytest.fixture(scope="module")
def float_accuracy(digits_cnn):
    mod, params, images, labels, _, test = digits_cnn
    acc = accuracy(mod, params, images[test], labels[test])
    assert acc > 90.0
    return acc


@pytest.mark.parametrize("mode,weights", [("kl_divergence", "max"), ("percentile", "power2")])
def test_every_layer_int8_within_one_point(digits_cnn, float_accuracy, mode, weights):
    mod, params, images, labels, train, test = digits_cnn
    calibration = [{"data": images[train[:len(test)]]}]
    with relay.quantize.qconfig(calibrate_mode=mode, weight_scale=weights,
                                skip_conv_layers=[], skip_dense_layer=False):
        qmod = relay.quantize.quantize(mod, params, dataset=calibration)
    assert qmod.astext().count('out_dtype="int32"') == 3   # both convs and the dense
    int8_acc = accuracy(qmod, {}, images[test], labels[test])
    assert int8_acc >= float_accuracy - 1.0, (mode, float_accuracy, int8_acc)


def test_tvm_defaults_skip_first_conv_and_dense(digits_cnn, float_accuracy):
    """qconfig() defaults: global_scale 8.0, power2 weights, conv 0 and dense stay float."""
    mod, params, images, labels, _, test = digits_cnn
    with relay.quantize.qconfig():
        qmod = relay.quantize.quantize(mod, params)
    assert qmod.astext().count('out_dtype="int32"') == 1
    assert accuracy(qmod, {}, images[test], labels[test]) >= float_accuracy - 1.0
