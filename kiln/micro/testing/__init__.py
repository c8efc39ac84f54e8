"""Helpers for microTVM tests (TVM's ``tvm.micro.testing``, v0.16 names).

Entry points: :func:`get_target`, :func:`get_supported_platforms`,
:func:`get_supported_boards`, :func:`mlf_extract_workspace_size_bytes`,
:func:`get_conv2d_relay_module`, :func:`create_header_file`, :func:`check_tune_log`,
:data:`AOT_DEFAULT_RUNNER` (from ``aot_test_utils``).
"""

from __future__ import annotations

from kiln.micro.testing.utils import (
    check_tune_log,
    create_header_file,
    get_conv2d_relay_module,
    get_supported_boards,
    get_supported_platforms,
    get_target,
    mlf_extract_workspace_size_bytes,
)

__all__ = ["get_target", "get_supported_platforms", "get_supported_boards",
           "mlf_extract_workspace_size_bytes", "get_conv2d_relay_module",
           "create_header_file", "check_tune_log"]
