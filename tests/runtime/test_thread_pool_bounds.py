"""config_threadpool refuses thread counts the C pool would truncate or could not run."""

from __future__ import annotations

import re

import pytest

import kiln
from kiln.runtime import thread_pool
from kiln.runtime.native import runtime_sources


@pytest.mark.parametrize("nthreads, message", [
    (2**32 + 1, "at most 1024"),   # the C int used to wrap it to 1 thread, silently
    (2**40, "at most 1024"),       # ... and this to 0: the default, silently
    (1025, "at most 1024"),
    (True, "must be an int"),
])
def test_config_threadpool_rejects_counts_out_of_range(nthreads, message):
    before = thread_pool.num_threads()
    with pytest.raises(kiln.TVMError, match=message):
        thread_pool.config_threadpool(0, nthreads)
    assert thread_pool.num_threads() == before


def test_max_threads_is_the_c_pool_team_limit():
    source = next(p for p in runtime_sources() if p.name == "kiln_runtime.c").read_text()
    assert re.search(rf"kKilnMaxTeam = {thread_pool.MAX_THREADS},", source)
