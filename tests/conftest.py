"""Shared pytest setup: a private build cache per test session."""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# Property tests check results, not speed: on a loaded 2-core machine a single example can take
# longer than hypothesis' default 200 ms deadline, which would fail the test for no fault of the
# code under test.
settings.register_profile(
    "kiln", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("kiln")

# Keep test builds out of the user's cache, but share them across xdist workers of one run.
os.environ.setdefault("KILN_CACHE_DIR", os.path.join(tempfile.gettempdir(), "kiln-test-cache"))
# Whole-build caching stays off: a test that builds a module another test built before would
# get the stored library instead of exercising the compiler (tests/relay/backend/
# test_build_cache.py turns it on for itself).
os.environ.setdefault("KILN_BUILD_CACHE", "0")


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(0)


def pytest_terminal_summary(terminalreporter):
    """Say so when the seed documents are not beside the repository (see seed_documents.py)."""
    from seed_documents import seed_source

    terminalreporter.write_line(seed_source())
