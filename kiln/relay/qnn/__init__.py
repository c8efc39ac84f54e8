"""``relay.qnn``: the quantized-network dialect (``relay.qnn.op``, ``relay.qnn.transform``)."""

from __future__ import annotations

# op first: it pulls in the element-wise ops, which build on the canonicalization module
from kiln.relay.qnn import op, transform  # isort: skip
from kiln.relay.qnn import interp  # noqa: F401 (registers the interpreter's semantics)

__all__ = ["op", "transform"]
