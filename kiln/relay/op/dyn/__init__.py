"""``relay.op.dyn``: the ``dyn.*`` operators (registered on import); see :mod:`.dyn`."""

from __future__ import annotations

from kiln.relay.op.dyn import dyn_nn  # noqa: F401 - registers the nn/image/algorithm variants
from kiln.relay.op.dyn.dyn import DYN_OPS, shape_tensor_length

__all__ = ["DYN_OPS", "shape_tensor_length"]
