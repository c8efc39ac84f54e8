"""relay.testing workloads: the types TVM's get_workload models have."""

import numpy as np
import pytest

from kiln.relay.testing import create_workload, mlp, resnet, run_infer_type


def test_mlp_workload_types_and_params():
    mod, params = mlp.get_workload(batch_size=4)
    assert str(mod["main"].checked_type.ret_type) == "Tensor[(4, 10), float32]"
    assert sorted(params) == sorted(f"fc{i}_{k}" for i in (1, 2, 3) for k in ("weight", "bias"))
    assert params["fc1_weight"].shape == (128, 784)
    assert not params["fc1_bias"].numpy().any()  # biases start at zero


@pytest.mark.parametrize("layers, params_count", [(18, 98), (50, 259)])
def test_resnet_workload_output_and_param_count(layers, params_count):
    mod, params = resnet.get_workload(num_layers=layers, image_shape=(3, 64, 64))
    assert str(mod["main"].checked_type.ret_type) == "Tensor[(1, 1000), float32]"
    assert len(params) == params_count
    assert np.all(params["bn0_moving_var"].numpy() == 1)


def test_unknown_resnet_depth_is_refused():
    with pytest.raises(ValueError, match="no ResNet with 19 layers"):
        resnet.get_net(num_layers=19)


def test_run_infer_type_fills_checked_types():
    from kiln import relay

    x = relay.var("x", shape=(2, 3))
    f = run_infer_type(relay.Function([x], relay.nn.relu(x)))
    assert str(f.body.checked_type) == "Tensor[(2, 3), float32]"
    mod, params = create_workload(f)
    assert params == {}
