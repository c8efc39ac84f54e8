"""The headers a cached C compile read, so that a cache key covers their contents.

Entry points: :func:`depfile_flags`, :func:`read_depfile`, :func:`keyed_by_headers`,
:func:`remember_headers`, :func:`remembered_headers`.

A C object or library in ``KILN_CACHE_DIR/cc`` is keyed in two steps, as ccache's direct mode
does. The first key covers the source text, the flags (include directories by path) and the
compiler's version. The compile writes a dependency file (``-MMD``: the headers it read
outside the system directories, kiln's runtime headers and a ``pragma_import_c`` source's own
included among them), whose list is kept beside the object under the first key. The object
itself is stored under a second key: the first one plus the contents of those headers. A later
lookup reads the list, hashes the headers as they are now and finds the object only when none
changed (an edited header was reused stale when keys held include paths only); an edited
header that includes a new one changes the second key too, and its recompile records the new
list.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["depfile_flags", "read_depfile", "keyed_by_headers", "remember_headers",
           "remembered_headers"]

# path -> ((mtime_ns, ctime_ns, size, inode), sha256 of the contents): a header read once
# per change
_DIGESTS: dict[str, tuple[tuple[int, int, int, int], bytes]] = {}
_SETTLED_SECONDS = 2.0


def depfile_flags(depfile: str | os.PathLike) -> list[str]:
    """The flags making gcc/clang write the non-system headers a compile reads to
    ``depfile``."""
    return ["-MMD", "-MF", os.fspath(depfile)]


def read_depfile(depfile: str | os.PathLike, source: str | os.PathLike) -> tuple[str, ...]:
    """The absolute paths of the headers listed in a make-style dependency file (the
    ``source`` itself left out), sorted."""
    text = Path(depfile).read_text(errors="surrogateescape").replace("\\\n", " ")
    _, _, prerequisites = text.partition(": ")
    names, current, escaped = [], "", False
    for char in prerequisites:  # "\ " is a space inside a name
        if escaped:
            current, escaped = current + char, False
        elif char == "\\":
            escaped = True
        elif char.isspace():
            names.append(current)
            current = ""
        else:
            current += char
    names.append(current)
    source = os.path.abspath(source)
    found = {os.path.abspath(n) for n in names if n}
    return tuple(sorted(found - {source}))


def _digest(path: str) -> bytes | None:
    """The SHA-256 of a header's contents (None: it is gone)."""
    try:
        st = os.stat(path)
        signature = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
        known = _DIGESTS.get(path)
        if known is not None and known[0] == signature:
            return known[1]
        digest = hashlib.sha256(Path(path).read_bytes()).digest()
    except OSError:
        return None
    # file times tick coarsely (milliseconds): a header written just now may be written
    # again within the same tick, so its digest is remembered only once it is older
    if time.time() - max(st.st_mtime, st.st_ctime) > _SETTLED_SECONDS:
        _DIGESTS[path] = (signature, digest)
    return digest


def keyed_by_headers(key: str, headers: Iterable[str]) -> str | None:
    """``key`` extended with the current contents of ``headers`` (None: one is gone, so an
    object compiled with it cannot be reused)."""
    digest = hashlib.sha256(key.encode())
    for header in headers:
        content = _digest(header)
        if content is None:
            return None
        digest.update(header.encode(errors="surrogateescape") + b"\0" + content)
    return digest.hexdigest()[:32]


def _manifest(folder: Path, key: str) -> Path:
    return folder / f"headers_{key}.txt"


def remembered_headers(folder: Path, key: str) -> tuple[str, ...] | None:
    """The headers the last compile under ``key`` read (None: nothing compiled under it)."""
    try:
        text = _manifest(folder, key).read_text(errors="surrogateescape")
    except OSError:
        return None
    return tuple(line for line in text.split("\n") if line)


def remember_headers(folder: Path, key: str, headers: Sequence[str]) -> None:
    """Record the headers a compile under ``key`` read (atomically: readers see the old list
    or the new one; a read-only cache only costs the next build a compile)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w", errors="surrogateescape") as f:
            f.write("".join(f"{h}\n" for h in headers))
        os.replace(tmp, _manifest(folder, key))
    except OSError:
        pass
