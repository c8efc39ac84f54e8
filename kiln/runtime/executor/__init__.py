"""Python wrappers of executor modules (TVM's ``tvm.runtime.executor``).

Entry point: :class:`AotModule`.
"""

from __future__ import annotations

from kiln.runtime.executor.aot_executor import AotModule

__all__ = ["AotModule"]
