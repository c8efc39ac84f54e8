"""microTVM (TVM's ``tvm.micro``): the C runtime's sources, Model Library Format export and
the helpers around building models for microcontrollers.

Entry points: :func:`export_model_library_format`, :func:`get_standalone_crt_dir` (the CRT's C
sources, in TVM's standalone layout), :mod:`kiln.micro.crt_build` (compile the CRT for a compiler
and flags), :mod:`kiln.micro.testing` (``get_target``, ...),
:mod:`kiln.micro.model_library_format`, :mod:`kiln.micro.board` (build an archive + the CRT into a
standalone program for the host or a QEMU Cortex-M and run it), :func:`autotvm_build_func` and
:class:`AutoTvmModuleLoader` (AutoTVM candidates measured on a QEMU Cortex-M).
"""

from __future__ import annotations

from kiln._lazy import attach
from kiln.micro.crt_build import get_standalone_crt_dir

_LAZY = {
    "export_model_library_format": ("kiln.micro.model_library_format",
                                    "export_model_library_format"),
    "UnsupportedInModelLibraryFormatError": ("kiln.micro.model_library_format",
                                             "UnsupportedInModelLibraryFormatError"),
    "model_library_format": "kiln.micro.model_library_format",
    "testing": "kiln.micro.testing",
    "generate_project": ("kiln.micro.project", "generate_project"),
    "generate_project_from_mlf": ("kiln.micro.project", "generate_project_from_mlf"),
    "get_microtvm_template_projects": ("kiln.micro.project", "get_microtvm_template_projects"),
    "GeneratedProject": ("kiln.micro.project", "GeneratedProject"),
    "TemplateProject": ("kiln.micro.project", "TemplateProject"),
    "project_api": "kiln.micro.project_api",
    "transport": "kiln.micro.transport",
    "TransportTimeouts": ("kiln.micro.transport", "TransportTimeouts"),
    "SessionTerminatedError": ("kiln.micro.session_layer", "SessionTerminatedError"),
    "Session": ("kiln.micro.session", "Session"),
    "create_local_graph_executor": ("kiln.micro.session", "create_local_graph_executor"),
    "create_local_aot_executor": ("kiln.micro.session", "create_local_aot_executor"),
    "board": "kiln.micro.board",
    "autotvm_build_func": ("kiln.micro.autotvm", "autotvm_build_func"),
    "AutoTvmModuleLoader": ("kiln.micro.autotvm", "AutoTvmModuleLoader"),
}

__getattr__, __dir__ = attach(__name__, _LAZY)
__all__ = ["get_standalone_crt_dir", *_LAZY]
