"""Fuzzing kiln's loaders: one harness per loader, crash-surviving workers, recorded findings.

``python -m tests.fuzz --minutes N`` runs a campaign over every loader (``--inputs N`` for a
fixed count, ``--targets a,b`` for some); ``tests/fuzz/test_fuzz_smoke.py`` runs a short one
in the test suite and ``tests/fuzz/test_structured.py`` fuzzes the structured formats with
hypothesis. Modules: :mod:`.targets` (loaders and seed corpora), :mod:`.mutate` (mutators),
:mod:`.campaign` (the driver), :mod:`.worker` (the process that loads inputs).
"""
