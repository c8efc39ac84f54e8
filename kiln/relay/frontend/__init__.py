"""``relay.frontend``: model importers (TVM's ``tvm.relay.frontend``).

Entry points: :func:`from_onnx` (ONNX models, :mod:`.onnx`), :func:`from_tflite` (TFLite
models, :mod:`.tflite`) and the shared helpers in
:mod:`.common` (``infer_shape``, ``infer_value``, ``new_var`` …).

Example
-------
>>> from kiln import relay
>>> callable(relay.frontend.from_onnx)
True
"""

from __future__ import annotations

from kiln.relay.frontend.onnx import from_onnx
from kiln.relay.frontend.tflite import from_tflite

__all__ = ["from_onnx", "from_tflite"]
