"""``tvm.micro``: microTVM - the C runtime (CRT) and the tools around it.

Entry points: :func:`get_standalone_crt_dir` (the CRT's C sources, in TVM's standalone layout)
and :mod:`kiln.micro.crt_build` (compile the CRT for a compiler and flags).
"""

from __future__ import annotations

from kiln.micro.crt_build import get_standalone_crt_dir

__all__ = ["get_standalone_crt_dir"]
