"""relay.quantize on a real task: small CNNs trained on scikit-learn's 8x8 digits keep their
top-1 accuracy within one point after int8 post-training quantization; the second one's
concatenate, average pool and global average pool are realized in integers."""

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


def load_digits():
    """(images N x 1 x 8 x 8 in [0, 1], labels, train indices, test indices)."""
    digits = datasets.load_digits()
    images = (digits.images / 16.0).astype("float32")[:, None]
    labels = digits.target
    order = np.random.default_rng(0).permutation(len(labels))
    return images, labels, order[:1400], order[1400:]


def train(net, images, labels, train_idx, epochs=25):
    """``net``'s weights after a few seconds of Adam on the training split."""
    torch.manual_seed(0)
    torch.set_num_threads(1)   # the suite shares two cores
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    x, y = torch.from_numpy(images[train_idx]), torch.from_numpy(labels[train_idx])
    for _ in range(epochs):
        for i in range(0, len(train_idx), 200):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x[i:i + 200]), y[i:i + 200]).backward()
            opt.step()
    return {k: v.detach().numpy() for k, v in net.state_dict().items()}


def train_digits_cnn():
    """(float Relay module, params, images, labels, train and test indices), trained here in a
    few seconds."""
    images, labels, train_idx, test = load_digits()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64, 10))
    w = train(net, images, labels, train_idx)
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
    return mod, params, images, labels, train_idx, test


def train_branchy_cnn():
    """Like :func:`train_digits_cnn`, an inception-style CNN: two branches (3x3 and 1x1
    convolutions) concatenated, a 2x2 average pool, a 3x3 convolution, a global average pool
    and the classifier."""
    images, labels, train_idx, test = load_digits()
    torch.manual_seed(0)
    convs = torch.nn.ModuleList([torch.nn.Conv2d(1, 8, 3, padding=1),
                                 torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 1),
                                 torch.nn.Conv2d(16, 16, 3, padding=1)])
    fc = torch.nn.Linear(16, 10)
    relu = torch.nn.functional.relu

    class Branchy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs, self.fc = convs, fc

        def forward(self, x):
            h = relu(convs[0](x))
            h = torch.cat([relu(convs[1](h)), relu(convs[2](h))], dim=1)
            h = relu(convs[3](torch.nn.functional.avg_pool2d(h, 2)))
            return fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, 1), 1))

    w = train(Branchy(), images, labels, train_idx, epochs=30)

    def conv(h, i, channels, size):
        h = relay.nn.conv2d(h, relay.var(f"w{i}"), padding=(size // 2,) * 2,
                            channels=channels, kernel_size=(size, size))
        return relay.nn.relu(relay.nn.bias_add(h, relay.var(f"b{i}")))

    data = relay.var("data", shape=(len(test), 1, 8, 8))
    h = conv(data, 0, 8, 3)
    h = relay.concatenate([conv(h, 1, 8, 3), conv(h, 2, 8, 1)], axis=1)
    h = conv(relay.nn.avg_pool2d(h, pool_size=(2, 2), strides=(2, 2)), 3, 16, 3)
    h = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(h))
    h = relay.nn.bias_add(relay.nn.dense(h, relay.var("fw")), relay.var("fb"))
    params = {f"{kind}{i}": w[f"convs.{i}.{name}"] for i in range(4)
              for kind, name in (("w", "weight"), ("b", "bias"))}
    params.update(fw=w["fc.weight"], fb=w["fc.bias"])
    mod = kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(h), h))
    return mod, params, images, labels, train_idx, test


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


def float_calls_after_integers(mod) -> list[str]:
    """Ops computing in float32 on a value that was integer somewhere upstream: a realized
    graph has only the output's dequantize there (one int -> float cast, one multiply)."""
    from kiln.relay.expr_functor import post_order_visit

    tainted, found = set(), []

    def visit(node):
        if not isinstance(node, (relay.Call, relay.Tuple, relay.TupleGetItem)):
            return
        inputs = node.args if isinstance(node, relay.Call) else \
            node.fields if isinstance(node, relay.Tuple) else [node.tuple_value]
        dtype = str(getattr(node.checked_type, "dtype", ""))
        if dtype.startswith("int"):
            tainted.add(id(node))
        elif any(id(a) in tainted for a in inputs):
            tainted.add(id(node))
            if isinstance(node, relay.Call):
                found.append(str(node.op.name))

    post_order_visit(mod["main"].body, visit)
    return found


@pytest.fixture(scope="module")
def branchy_cnn():
    return train_branchy_cnn()


def test_concatenate_and_average_pools_stay_integer(branchy_cnn):
    """Every layer, the concatenation of the two branches, the average pool and the global
    average pool in integers; accuracy within one point of float32."""
    mod, params, images, labels, train_idx, test = branchy_cnn
    float_acc = accuracy(mod, params, images[test], labels[test])
    assert float_acc > 85.0   # 91.2 here: the global average pool keeps the model small
    calibration = [{"data": images[train_idx[:len(test)]]}]
    with relay.quantize.qconfig(calibrate_mode="kl_divergence", weight_scale="max",
                                skip_conv_layers=[], skip_dense_layer=False):
        qmod = relay.quantize.quantize(mod, params, dataset=calibration)
    text = qmod.astext()
    layers = [line for line in text.splitlines() if "nn.conv2d(" in line or "nn.dense(" in line]
    assert len(layers) == 5 and all('out_dtype="int32"' in line for line in layers)
    assert float_calls_after_integers(qmod) == ["cast", "multiply"]
    for name in ("concatenate", "nn.avg_pool2d", "nn.global_avg_pool2d"):
        assert f"{name}(" in text
    int8_acc = accuracy(qmod, {}, images[test], labels[test])
    assert int8_acc >= float_acc - 1.0, (float_acc, int8_acc)
