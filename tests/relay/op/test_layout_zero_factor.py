"""A layout with a block factor of 0 (``NCHW0c``) is refused by name wherever a layout is read
(it raised Python's "integer modulo by zero" from inside layout_transform's type relation)."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay, te, topi
from kiln.runtime.error import TVMError

X = relay.var("x", shape=(1, 16, 4, 4))
W = relay.var("w", shape=(16, 16, 3, 3))


@pytest.mark.parametrize("make", [
    lambda: relay.layout_transform(X, "NCHW", "NCHW0c"),
    lambda: relay.layout_transform(X, "NCHW0c", "NCHW"),
    lambda: relay.nn.conv2d(X, W, data_layout="NCHW0c"),
    lambda: relay.nn.max_pool2d(X, layout="NCHW0c"),
], ids=["to", "from", "conv2d", "max_pool2d"])
def test_relay_refuses_a_zero_block_factor_naming_the_layout(make):
    body = make()
    mod = kiln.IRModule.from_expr(relay.Function(relay.analysis.free_vars(body), body))
    with pytest.raises(TVMError, match=r"'NCHW0c': sub-axis c has factor 0"):
        relay.transform.InferType()(mod)


def test_topi_layout_transform_refuses_a_zero_block_factor():
    with pytest.raises(TVMError, match=r"'NCHW0c': sub-axis c has factor 0"):
        topi.layout_transform(te.placeholder((1, 16, 4, 4)), "NCHW", "NCHW0c")
