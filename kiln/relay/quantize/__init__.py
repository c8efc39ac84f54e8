"""``relay.quantize``: post-training quantization (TVM v0.16's ``tvm.relay.quantize``).

Entry points: :func:`qconfig`, :func:`current_qconfig`, :func:`quantize`,
:func:`prerequisite_optimize`, :func:`annotate`, :func:`realize` and the calibration helpers
in :mod:`.calibrate`.
"""

from __future__ import annotations

from kiln.relay.quantize.calibrate import kl_divergence_scale
from kiln.relay.quantize.qconfig import QConfig, current_qconfig, qconfig
from kiln.relay.quantize.quantize import annotate, prerequisite_optimize, quantize, realize

__all__ = ["QConfig", "qconfig", "current_qconfig", "quantize", "prerequisite_optimize",
           "annotate", "realize", "kl_divergence_scale"]
