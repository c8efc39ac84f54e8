"""The seed design documents whose examples the tests run: from ``../shared/seeds`` or the repo.

The seed texts live beside the repository (``../shared/seeds/<number>_*.txt``, or the folder
``$KILN_SEEDS_DIR`` names). A plain clone has nothing beside it; then :func:`seed_text` reads
the excerpts kept in ``tests/seed_examples/<number>.txt``: the lines of each document that
hold its examples and the output it shows for them, verbatim, with a first line naming the
document and the lines. The pytest header says which source a run used.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEEDS_DIR = Path(os.environ.get("KILN_SEEDS_DIR", REPO.parent / "shared" / "seeds"))
EXCERPTS_DIR = REPO / "tests" / "seed_examples"


def seed_path(number: str) -> Path:
    """The file seed ``number`` ("000" ... "004") is read from: the document, else its excerpt."""
    found = sorted(SEEDS_DIR.glob(f"{number}_*.txt")) if SEEDS_DIR.is_dir() else []
    if found:
        return found[0]
    excerpt = EXCERPTS_DIR / f"{number}.txt"
    if excerpt.is_file():
        return excerpt
    raise FileNotFoundError(f"seed {number} not found in {SEEDS_DIR} (set KILN_SEEDS_DIR) "
                            f"and no excerpt {excerpt} is kept in the repository")


def seed_text(number: str) -> str:
    """The text of seed document ``number`` (or of its in-repository excerpt)."""
    return seed_path(number).read_text(encoding="utf-8")


def seed_source() -> str:
    """One line for the pytest header: where the seed texts come from in this run."""
    if SEEDS_DIR.is_dir() and any(SEEDS_DIR.glob("*_*.txt")):
        return f"seed documents: {SEEDS_DIR}"
    return (f"seed documents: {SEEDS_DIR} is absent; the seed-example tests use the excerpts "
            f"in {EXCERPTS_DIR}")
