"""microTVM (TVM's ``tvm.micro``): the C runtime's sources, Model Library Format export and
the helpers around building models for microcontrollers.

Entry points: :func:`export_model_library_format`, :func:`get_standalone_crt_dir`,
:mod:`kiln.micro.testing` (``get_target``, ...), :mod:`kiln.micro.model_library_format`.
"""

from __future__ import annotations

from kiln._lazy import attach

_LAZY = {
    "export_model_library_format": ("kiln.micro.model_library_format",
                                    "export_model_library_format"),
    "UnsupportedInModelLibraryFormatError": ("kiln.micro.model_library_format",
                                             "UnsupportedInModelLibraryFormatError"),
    "get_standalone_crt_dir": ("kiln.micro.model_library_format", "get_standalone_crt_dir"),
    "model_library_format": "kiln.micro.model_library_format",
    "testing": "kiln.micro.testing",
}

__getattr__, __dir__ = attach(__name__, _LAZY)
