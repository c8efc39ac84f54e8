"""``tvm.micro.testing.aot_test_utils``: the default AOT test runner (the host)."""

from __future__ import annotations

from kiln.testing.aot import AOT_DEFAULT_RUNNER, AOTTestRunner

__all__ = ["AOT_DEFAULT_RUNNER", "AOTTestRunner"]
