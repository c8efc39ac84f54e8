"""Shared pytest setup: a private build cache per test session."""

import os
import tempfile

import pytest

# Keep test builds out of the user's cache, but share them across xdist workers of one run.
os.environ.setdefault("KILN_CACHE_DIR", os.path.join(tempfile.gettempdir(), "kiln-test-cache"))


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(0)


def pytest_terminal_summary(terminalreporter):
    """Say so when the seed documents are not beside the repository (see seed_documents.py)."""
    from seed_documents import seed_source

    terminalreporter.write_line(seed_source())
