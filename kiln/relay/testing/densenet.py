"""DenseNet workloads (TVM's ``relay.testing.densenet``, after Huang et al. 2017).

As TVM's workload: within a dense block each layer (bn-relu-1x1 conv-bn-relu-3x3 conv) feeds
the next and the block concatenates every layer's output; transitions halve channels and
resolution. The head pools globally, which equals TVM's 7x7 pool at its 224x224 default and
also serves smaller images.
"""

from __future__ import annotations

from typing import Any

from kiln import relay
from kiln.relay.testing import create_workload, layers

# densenet_size -> (initial features, growth rate, layers per block)
_SPECS = {121: (64, 32, (6, 12, 24, 16)), 161: (96, 48, (6, 12, 36, 24)),
          169: (64, 32, (6, 12, 32, 32)), 201: (64, 32, (6, 12, 48, 32))}


def _bn_relu_conv(x: Any, channels: int, kernel: int, bn_name: str, conv_name: str) -> Any:
    x = relay.nn.relu(layers.batch_norm_infer(x, name=bn_name))
    return layers.conv2d(x, channels=channels, kernel_size=(kernel, kernel),
                         padding=(kernel // 2, kernel // 2), name=conv_name)


def make_dense_net(num_init_features: int, growth_rate: int, block_config: tuple,
                   data_shape: tuple, data_dtype: str, bn_size: int = 4,
                   classes: int = 1000) -> Any:
    """The DenseNet function for any block configuration (``get_workload`` picks TVM's)."""
    data = relay.var("data", shape=data_shape, dtype=data_dtype)
    x = layers.conv2d(data, channels=num_init_features, kernel_size=(7, 7), strides=(2, 2),
                      padding=(3, 3), name="conv1")
    x = relay.nn.relu(layers.batch_norm_infer(x, name="batch1"))
    x = relay.nn.max_pool2d(x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
    features = num_init_features
    for i, num_layers in enumerate(block_config):
        outputs = []
        for j in range(num_layers):
            index = f"{i}_{j}"
            x = _bn_relu_conv(x, bn_size * growth_rate, 1, f"batch_1_{index}",
                              f"conv2d_1_{index}")
            x = _bn_relu_conv(x, growth_rate, 3, f"batch_2_{index}", f"conv2d_2_{index}")
            outputs.append(x)
        x = relay.concatenate(outputs, 1)
        features += num_layers * growth_rate
        if i != len(block_config) - 1:
            features //= 2
            x = _bn_relu_conv(x, features, 1, f"batch_t_{i}", f"conv_t_{i}")
            x = relay.nn.avg_pool2d(x, pool_size=(2, 2), strides=(2, 2))
    x = relay.nn.relu(layers.batch_norm_infer(x, name="batch2"))
    x = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(x))
    out = layers.dense_add_bias(x, units=classes, name="dense")
    return relay.Function(relay.analysis.free_vars(out), out)


def get_workload(densenet_size: int = 121, classes: int = 1000, batch_size: int = 4,
                 image_shape: tuple = (3, 224, 224),
                 dtype: str = "float32") -> tuple[Any, dict]:
    """``(mod, params)`` of DenseNet-``densenet_size`` (121, 161, 169 or 201)."""
    if densenet_size not in _SPECS:
        raise ValueError(f"Invalid densenet_size {densenet_size}: choose one of "
                         f"{sorted(_SPECS)}")
    features, growth, blocks = _SPECS[densenet_size]
    return create_workload(make_dense_net(features, growth, blocks,
                                          (batch_size, *image_shape), dtype, classes=classes))
