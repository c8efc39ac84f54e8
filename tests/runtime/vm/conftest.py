"""Fixtures for the VM tests: the compiled C kernels (once per session) and program helpers."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from vm_kernels import CSourceKernels  # noqa: E402


@pytest.fixture(scope="session")
def kernels():
    lib = CSourceKernels()
    lib.get_function("add_f32")  # compile now, once
    return lib
