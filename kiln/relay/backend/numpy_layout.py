"""NumPy layout transforms for the reference rules (``NCHW`` → ``NCHW8c`` …).

Entry point: :func:`layout_transform`, which is :func:`kiln.relay.op.layout.convert_array`
(written beside the layout parser and :func:`~kiln.relay.op.layout.convert_shape`, so the op
family modules can use it while the op library loads).
"""

from __future__ import annotations

from kiln.relay.op.layout import convert_array as layout_transform

__all__ = ["layout_transform"]
