"""``relay.qnn``: the quantized-network dialect (``relay.qnn.op``, ``relay.qnn.transform``)."""

from __future__ import annotations

from kiln.relay.qnn import op, transform

__all__ = ["op", "transform"]
