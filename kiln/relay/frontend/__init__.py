"""``relay.frontend``: model importers (TVM's ``tvm.relay.frontend``).

Entry points: :func:`from_onnx` (ONNX models, :mod:`.onnx`) and the shared helpers in
:mod:`.common` (``infer_shape``, ``infer_value``, ``new_var`` …).

Example
-------
>>> from kiln import relay
>>> callable(relay.frontend.from_onnx)
True
"""

from __future__ import annotations

from kiln.relay.frontend.onnx import from_onnx

__all__ = ["from_onnx"]
