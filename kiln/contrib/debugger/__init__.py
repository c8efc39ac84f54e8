"""TVM's ``tvm.contrib.debugger``: run a graph op by op, timing and dumping each node.

Entry point: :mod:`kiln.contrib.debugger.debug_executor`.
"""

from __future__ import annotations

from kiln._lazy import attach

__getattr__, __dir__ = attach(__name__, {"debug_executor": "kiln.contrib.debugger.debug_executor"})
