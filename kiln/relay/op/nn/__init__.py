"""``relay.nn``: neural-network operators (convolution, pooling, normalization, activations).

Entry points: everything in :mod:`.conv` (conv1d/2d/3d, transposed and contrib convs),
:mod:`.conv_nchwc` (the channel-blocked convs AlterOpLayout makes),
:mod:`.dense` (dense, matmul, batch_matmul, contrib_dense_pack), :mod:`.pool`
(max/avg/global/adaptive pooling), :mod:`.nn` (bias_add, relu, softmax, pad, dropout …),
:mod:`.norm` (batch_norm, layer_norm …), :mod:`.resample` (upsampling, depth_to_space …)
and :mod:`.rnn` (fused LSTM/GRU cells), re-exported here under TVM's names.
"""

from __future__ import annotations

from kiln.relay.op.nn.conv import *  # noqa: F403
from kiln.relay.op.nn.conv import __all__ as _conv_all
from kiln.relay.op.nn.conv_nchwc import *  # noqa: F403
from kiln.relay.op.nn.conv_nchwc import __all__ as _conv_nchwc_all
from kiln.relay.op.nn.dense import *  # noqa: F403
from kiln.relay.op.nn.dense import __all__ as _dense_all
from kiln.relay.op.nn.nn import *  # noqa: F403
from kiln.relay.op.nn.nn import __all__ as _nn_all
from kiln.relay.op.nn.norm import *  # noqa: F403
from kiln.relay.op.nn.norm import __all__ as _norm_all
from kiln.relay.op.nn.pool import *  # noqa: F403
from kiln.relay.op.nn.pool import __all__ as _pool_all
from kiln.relay.op.nn.resample import *  # noqa: F403
from kiln.relay.op.nn.resample import __all__ as _resample_all
from kiln.relay.op.nn.rnn import *  # noqa: F403
from kiln.relay.op.nn.rnn import __all__ as _rnn_all

__all__ = [*_conv_all, *_conv_nchwc_all, *_dense_all, *_pool_all, *_nn_all, *_norm_all,
           *_resample_all, *_rnn_all]
