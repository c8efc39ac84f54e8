"""Image computes (TVM's ``topi.image``): :func:`resize1d`, :func:`resize2d`, :func:`resize`."""

from __future__ import annotations

from kiln.topi.image.resize import resize, resize1d, resize2d

__all__ = ["resize", "resize1d", "resize2d"]
