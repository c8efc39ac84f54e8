"""``relay.quantize.qconfig``: the post-training quantization settings (TVM v0.16's QConfig).

Entry points: :func:`qconfig`, :func:`current_qconfig`, :class:`QConfig`.

Example
-------
>>> from kiln import relay
>>> with relay.quantize.qconfig(calibrate_mode="percentile", skip_conv_layers=[]):
...     relay.quantize.current_qconfig().calibrate_mode
'percentile'
>>> relay.quantize.current_qconfig().global_scale
8.0
"""

from __future__ import annotations

from typing import Any

from kiln.runtime.error import TVMError

__all__ = ["QConfig", "qconfig", "current_qconfig", "DEFAULTS"]

# TVM v0.16's defaults (python/tvm/relay/quantize/quantize.py)
DEFAULTS: dict[str, Any] = {
    "nbit_input": 8, "nbit_weight": 8, "nbit_activation": 32,
    "dtype_input": "int8", "dtype_weight": "int8", "dtype_activation": "int32",
    "calibrate_mode": "global_scale", "global_scale": 8.0, "weight_scale": "power2",
    "skip_dense_layer": True, "skip_conv_layers": [0], "do_simulation": False,
    "round_for_shift": True, "debug_enabled_ops": None, "rounding": "UPWARD",
    "calibrate_chunk_by": -1, "partition_conversions": "disabled",
}
CHOICES = {"calibrate_mode": ("global_scale", "kl_divergence", "percentile"),
           "weight_scale": ("power2", "max"), "rounding": ("UPWARD", "TONEAREST"),
           # kiln realizes one integer module; TVM's partitioned and simulated forms are not
           # built, so asking for them is an error rather than a silent no-op
           "partition_conversions": ("disabled",), "do_simulation": (False,),
           "nbit_activation": (32,),
           "dtype_input": ("int8",), "dtype_weight": ("int8",),
           "dtype_activation": ("int32",)}


class QConfig:
    """Quantization settings; use as a context manager (``with qconfig(...):``)."""

    _stack: list[QConfig] = []

    def __init__(self, **fields: Any) -> None:
        unknown = sorted(set(fields) - set(DEFAULTS))
        if unknown:
            raise TVMError(f"qconfig: unknown option(s) {', '.join(unknown)}; valid options: "
                           f"{', '.join(sorted(DEFAULTS))}")
        values = {**DEFAULTS, **fields}
        for name, allowed in CHOICES.items():
            if values[name] not in allowed:
                raise TVMError(f"qconfig: {name}={values[name]!r} is not supported; choose one "
                               f"of {', '.join(map(repr, allowed))}")
        for name in ("nbit_input", "nbit_weight"):
            if not 2 <= int(values[name]) <= 8:
                raise TVMError(f"qconfig: {name}={values[name]} must be 2..8 for int8 storage")
        if float(values["global_scale"]) <= 0:
            raise TVMError(f"qconfig: global_scale must be positive, got "
                           f"{values['global_scale']}")
        values["skip_conv_layers"] = list(values["skip_conv_layers"] or [])
        self.__dict__.update(values)

    def __enter__(self) -> QConfig:
        QConfig._stack.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        QConfig._stack.pop()

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={self.__dict__[k]!r}" for k in DEFAULTS)
        return f"qconfig({fields})"


def qconfig(**kwargs: Any) -> QConfig:
    """A :class:`QConfig` with ``kwargs`` over TVM's defaults (see :data:`DEFAULTS`)."""
    return QConfig(**kwargs)


def current_qconfig() -> QConfig:
    """The innermost active :class:`QConfig` (TVM's defaults outside any ``with``)."""
    return QConfig._stack[-1] if QConfig._stack else QConfig()
