"""``relay.image``: image operators (resize1d, resize2d)."""

from __future__ import annotations

from kiln.relay.op.image.image import resize1d, resize2d

__all__ = ["resize1d", "resize2d"]
