"""Every relay.testing workload builds with relay.build and gives the interpreter's outputs on
the graph executor and the VM (small batch and image sizes keep it fast)."""

import numpy as np
import pytest
import tvm
from tvm import relay
from tvm.relay.testing import executors

from kiln.relay.testing.executors import ExecutorConfig

WORKLOADS = {
    "mlp": dict(batch_size=1, image_shape=(1, 8, 8)),
    # the quick-start script's shapes, so the two share compiled kernels through the cache
    "resnet": dict(batch_size=1, num_classes=10, num_layers=18, image_shape=(3, 32, 32)),
    "mobilenet": dict(batch_size=1, num_classes=10, image_shape=(3, 32, 32)),
    "squeezenet": dict(batch_size=1, num_classes=10, version="1.1", image_shape=(3, 48, 48)),
    "vgg": dict(batch_size=1, num_classes=10, image_shape=(3, 32, 32)),
    "dqn": dict(batch_size=1, num_actions=4, image_shape=(4, 36, 36)),
    "dcgan": dict(batch_size=1, oshape=(3, 16, 16), ngf=8, random_len=10),
    "synthetic": dict(input_shape=(1, 3, 8, 6)),
    "lstm": dict(iterations=3, num_hidden=4),
    "resnet_3d": dict(batch_size=1, num_classes=10, num_layers=18, image_shape=(3, 4, 8, 8)),
}
CONFIGS = [ExecutorConfig("graph", 3, "constants"), ExecutorConfig("vm", 3, "constants")]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_runs_on_graph_and_vm_like_the_interpreter(name):
    mod, params = getattr(relay.testing, name).get_workload(**WORKLOADS[name])
    main = mod["main"]
    assert main.params[0].name_hint == "data"
    assert [p.name_hint for p in main.params[1:]] == list(params)
    shape = [int(d) for d in main.params[0].checked_type.shape]
    data = np.random.default_rng(0).uniform(-1, 1, shape).astype("float32")
    args = [data, *(v.numpy() for v in params.values())]
    # The LSTM calls a cell function per step: a graph executor runs only fused primitive
    # functions (in TVM too), so that workload is for the VM.
    configs = CONFIGS[1:] if name == "lstm" else CONFIGS
    [out] = executors.check_executors_agree(mod, args, configs=configs, bind=list(params),
                                            rtol=1e-4, atol=1e-5)
    assert np.all(np.isfinite(out))


def test_workloads_reject_bad_configurations():
    with pytest.raises(ValueError, match="Choices are 11, 13, 16, 19"):
        relay.testing.vgg.get_workload(num_layers=12)
    with pytest.raises(ValueError, match="Unsupported SqueezeNet version"):
        relay.testing.squeezenet.get_workload(version="2.0")
    with pytest.raises(tvm.TVMError, match="square output"):
        relay.testing.dcgan.get_workload(1, oshape=(3, 12, 12))
    with pytest.raises(tvm.TVMError, match="NCHW"):
        relay.testing.mobilenet.get_workload(layout="NHWC")
    with pytest.raises(ValueError, match="at least one iteration"):
        relay.testing.lstm.get_workload(0, 4)
    with pytest.raises(ValueError, match="no kernel layout"):
        relay.testing.layers.conv_kernel_layout("NCW")


def test_nat_helpers_round_trip_through_the_interpreter():
    from tvm.relay.prelude import Prelude
    from tvm.relay.testing import count, make_nat_expr, make_nat_value

    prelude = Prelude()
    value = relay.create_executor("debug", mod=prelude.mod).evaluate(make_nat_expr(prelude, 3))
    assert count(prelude, value) == 3
    assert count(prelude, make_nat_value(prelude, 0)) == 0
    assert count(prelude, make_nat_value(prelude, 2000)) == 2000
    with pytest.raises(tvm.TVMError, match="non-negative int"):
        make_nat_expr(prelude, -1)


def test_check_grad_compares_relay_gradients_with_finite_differences():
    x = relay.var("x", shape=(3,), dtype="float64")
    y = relay.var("y", shape=(3,), dtype="float64")
    func = relay.Function([x, y], relay.multiply(x, relay.exp(y)))
    relay.testing.check_grad(func)
    # A coarse step leaves an O(eps^2) error that a near-zero tolerance must catch.
    with pytest.raises(AssertionError):
        relay.testing.check_grad(func, inputs=[np.ones(3), np.ones(3)], eps=1e-2, rtol=1e-9,
                                 atol=1e-12)
    assert relay.testing.count_ops(func.body) == {"multiply": 1, "exp": 1}
    assert relay.testing.rand("float32", 2, 3).shape == (2, 3)


def test_initializers_fill_by_name_as_tvm():
    from tvm.relay.testing.init import Constant, Xavier

    weight = np.zeros((4, 2, 3, 3))
    np.random.seed(0)
    Xavier()("conv_weight", weight)
    bound = np.sqrt(3.0 / ((2 * 9 + 4 * 9) / 2.0))  # magnitude / average fan, spatial counted
    assert np.all(np.abs(weight) <= bound) and np.abs(weight).max() > 0.8 * bound
    gamma, mean = np.zeros(3), np.ones(3)
    Constant()("bn_gamma", gamma)
    Constant()("bn_moving_mean", mean)
    assert gamma.tolist() == [1, 1, 1] and mean.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="Unknown initialization pattern for scale"):
        Constant()("scale", gamma)
    with pytest.raises(ValueError, match="at least 2D"):
        Xavier()("fc_weight", np.zeros(3))
    mod, params = relay.testing.synthetic.get_workload(input_shape=(1, 2, 4, 4))
    assert np.all(params["conv_weight"].numpy() == 1.0 / (2 * 2 * 3 * 3))


def test_profiler_vm_reports_kernels():
    from tvm.runtime import profiler_vm
    from tvm.runtime.vm import VirtualMachine

    x = relay.var("x", shape=(4,))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.exp(x)))
    exe = relay.vm.compile(mod, target="llvm")
    assert profiler_vm.enabled()
    vm = profiler_vm.VirtualMachineProfiler(exe, tvm.cpu())
    assert isinstance(vm, VirtualMachine)
    report = vm.profile(tvm.nd.array(np.zeros(4, "float32")), func_name="main")
    assert any(row["Name"] != "(dispatch)" for row in report.calls)


def test_densenet_small_configuration_runs_everywhere_and_121_types():
    from tvm.relay.testing import create_workload, densenet

    net = densenet.make_dense_net(8, 4, (2, 2), (1, 3, 32, 32), "float32", bn_size=2,
                                  classes=5)
    mod, params = create_workload(net)
    data = np.random.default_rng(1).uniform(-1, 1, (1, 3, 32, 32)).astype("float32")
    args = [data, *(v.numpy() for v in params.values())]
    executors.check_executors_agree(mod, args, configs=CONFIGS, bind=list(params), rtol=1e-4,
                                    atol=1e-5)
    # The full-size network is checked for shapes only: building it takes minutes of CPU.
    mod, params = densenet.get_workload(121, classes=10, batch_size=1)
    assert str(mod["main"].checked_type.ret_type) == "Tensor[(1, 10), float32]"
    assert sum(name.startswith("conv2d_2_") for name in params) == 6 + 12 + 24 + 16
    with pytest.raises(ValueError, match="Invalid densenet_size"):
        densenet.get_workload(100)


def test_inception_v3_types_at_its_smallest_input():
    # Shapes only: building Inception v3 takes minutes of CPU (about 100 distinct kernels).
    mod, params = relay.testing.inception_v3.get_workload(num_classes=10,
                                                          image_shape=(3, 75, 75))
    assert str(mod["main"].checked_type.ret_type) == "Tensor[(1, 10), float32]"
    # 2048 features reach the classifier, as in the paper's network.
    assert params["fc1_weight"].shape == (10, 2048)
    with pytest.raises(ValueError, match="at least 75x75"):
        relay.testing.inception_v3.get_workload(image_shape=(3, 64, 64))
