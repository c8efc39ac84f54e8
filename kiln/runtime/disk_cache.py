"""Size cap of the on-disk build cache (``KILN_CACHE_DIR``): least recently used entries go.

Entry points: :func:`touch` (a hit marks its entry used), :func:`stored` (after a store:
evicts in the background when the cache is over its cap, checked at most once a minute per
cache), :func:`evict`, :func:`reading` (no eviction while an entry is read in steps),
:func:`cache_info`, :func:`clear` (``kiln cache info|evict|clear``).

Layout: the folders of :data:`FOLDERS` under the cache directory hold entries (nothing
else there is touched, in case ``KILN_CACHE_DIR`` names a folder shared with other files);
an entry is the files and folders that
share a name up to its first dot (``llvm/<key>.o`` and ``<key>.ll`` are one entry). An
entry's modification time is its last use: stores write it and hits :func:`touch` it.

The cap is ``KILN_CACHE_MAX_MB`` megabytes (default 2048; ``0`` turns
eviction off). TVM keeps no such cache, so it has no such knob. Past the cap the oldest
entries go until the cache is at 90% of it. Processes share a cache safely:

- one evictor at a time (an ``flock`` on ``.evict.lock``; a busy lock skips the round), and
  none while a reader holds the lock shared (:func:`reading`: a build folder being loaded);
- an entry used in the last :data:`GRACE_SECONDS` is never evicted, so a process that has
  just found an entry has minutes to load it; the cap may be exceeded meanwhile;
- an entry goes by an atomic rename to a hidden name and is deleted only then: a reader sees
  the whole entry or none (files it already opened stay readable), and an entry touched
  between the evictor's look and its rename is renamed back;
- writers' temporary files and folders (``tmp*``, ``.tmp-*``, ``*.tmp``) are left alone
  until a day old (a crashed writer's leftovers).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kiln.runtime import config

__all__ = ["touch", "stored", "evict", "reading", "cache_info", "clear", "GRACE_SECONDS",
           "LOW_WATER", "FOLDERS"]

# where kiln stores: C objects and libraries, LLVM objects, whole builds, lowered kernels,
# microTVM objects
FOLDERS = ("cc", "llvm", "build", "lower", "micro-objects")

GRACE_SECONDS = 300.0
_STALE_TEMP_SECONDS = 86400.0
_CHECK_EVERY_SECONDS = 60.0
# past the cap, eviction goes on until the cache is at this fraction of it (so that the next
# few stores do not start another round at once)
LOW_WATER = 0.9
_TRASH = ".evicted-"


@dataclass
class Entry:
    """One cache entry: its folder (``cc``, ``llvm`` ...), name, files, bytes, last use."""

    folder: str
    name: str
    paths: list[Path]
    size: int
    used: float


def touch(path: str | os.PathLike) -> bool:
    """Mark the entry at ``path`` used now; False when it is not there (a miss). An entry
    of a cache this process may not write (a shared read-only one) is there all the same."""
    try:
        os.utime(path)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.exists(path)


def _is_temporary(name: str) -> bool:
    return name.startswith(("tmp", ".")) or name.endswith(".tmp")


def _tree_size(path: str) -> int:
    """Bytes of the files under the folder ``path`` (0 for what vanished meanwhile)."""
    total = 0
    try:
        with os.scandir(path) as items:
            for item in items:
                if item.is_dir(follow_symlinks=False):
                    total += _tree_size(item.path)
                else:
                    total += item.stat(follow_symlinks=False).st_size
    except OSError:  # gone meanwhile: another process evicted or replaced it
        pass
    return total


def _size_and_mtime(item: os.DirEntry) -> tuple[int, float]:
    try:
        info = item.stat(follow_symlinks=False)
    except OSError:
        return 0, 0.0
    if item.is_dir(follow_symlinks=False):
        return _tree_size(item.path), info.st_mtime
    return info.st_size, info.st_mtime


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def _scan(root: Path, now: float, tidy: bool = True) -> tuple[list[Entry], int]:
    """The cache's entries, and the bytes of temporary files it keeps for now (with
    ``tidy``, stale temporary files and an earlier evictor's leftovers are removed)."""
    groups: dict[tuple[str, str], Entry] = {}
    kept = 0
    for folder in (root / name for name in FOLDERS):
        if not folder.is_dir() or folder.is_symlink():
            continue
        with os.scandir(folder) as items:
            for item in items:
                path = Path(item.path)
                size, mtime = _size_and_mtime(item)
                if tidy and item.name.startswith(_TRASH):
                    _remove(path)
                elif _is_temporary(item.name):
                    if tidy and now - mtime > _STALE_TEMP_SECONDS:
                        _remove(path)
                    else:
                        kept += size
                else:
                    name = item.name.split(".")[0]
                    entry = groups.setdefault((folder.name, name),
                                              Entry(folder.name, name, [], 0, 0.0))
                    entry.paths.append(path)
                    entry.size += size
                    entry.used = max(entry.used, mtime)
    return list(groups.values()), kept


def _evict_entry(entry: Entry, now: float) -> bool:
    """Rename ``entry``'s files away and delete them; False (and nothing removed) when a
    process used it since the scan."""
    moved = []
    for path in entry.paths:
        trash = path.with_name(f"{_TRASH}{os.getpid()}-{path.name}")
        try:
            os.rename(path, trash)
        except OSError:
            continue  # already gone
        moved.append((path, trash))
    if any(now - _mtime(trash) < GRACE_SECONDS for _, trash in moved):
        for path, trash in moved:  # touched between the scan and the rename: put it back
            with contextlib.suppress(OSError):
                os.rename(trash, path)
        return False
    for _, trash in moved:
        _remove(trash)
    return True


@contextlib.contextmanager
def _evictor_lock(root: Path, wait: bool, shared: bool = False):
    """Hold the cache's evictor lock (yield True), or yield False when another process
    holds it and ``wait`` is false. ``shared``: a reader's hold (several at once), which
    keeps evictors out."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): one evictor per process only
        yield True
        return
    with open(root / ".evict.lock", "a+b") as lock:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(lock, mode | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def reading(root: Path | None = None):
    """Keep evictors out while an entry is read in several steps (a build folder): an
    evictor renaming it away meanwhile made the reader take it for damaged and delete it,
    even after the evictor had put it back. Waits for an eviction in progress; a cache whose
    lock cannot be opened (read-only) is read without it."""
    root = config.cache_dir() if root is None else root
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):
            stack.enter_context(_evictor_lock(root, wait=True, shared=True))
        yield


def evict(max_bytes: int | None = None, root: Path | None = None, wait: bool = False) -> int:
    """Evict least recently used entries until the cache is at 90% of ``max_bytes``
    (default: ``KILN_CACHE_MAX_MB``); return the bytes removed. Does nothing when the cap is
    0, or when another process is evicting and ``wait`` is false."""
    limit = config.cache_max_bytes() if max_bytes is None else max_bytes
    root = config.cache_dir() if root is None else root
    if limit <= 0:
        return 0
    removed = 0
    with _evictor_lock(root, wait) as held:
        if not held:
            return 0
        now = time.time()
        entries, total = _scan(root, now)
        total += sum(e.size for e in entries)
        if total <= limit:
            return 0
        for entry in sorted(entries, key=lambda e: e.used):
            if total <= limit * LOW_WATER:
                break
            if now - entry.used < GRACE_SECONDS:
                break  # every later entry is newer: all in use, the cap waits for them
            if _evict_entry(entry, now):
                total -= entry.size
                removed += entry.size
    return removed


def stored() -> threading.Thread | None:
    """Call after storing an entry: when the cache's last check is a minute old, check it
    (and evict past the cap) on a background thread, which is returned; a scan reads every
    entry's metadata (about a second for a 4 GB cache of 24,000 entries), which a build
    should not wait for."""
    if config.cache_max_bytes() <= 0:
        return None
    try:
        root = config.cache_dir()
        stamp = root / ".evict.stamp"
        if time.time() - _mtime(stamp) < _CHECK_EVERY_SECONDS:
            return None
        stamp.touch()
    except OSError:  # a read-only or vanished cache: nothing to evict
        return None
    thread = threading.Thread(target=_evict_quietly, args=(root,), name="kiln-cache-evict",
                              daemon=True)
    thread.start()
    return thread


def _evict_quietly(root: Path) -> None:
    with contextlib.suppress(OSError):  # a cache removed or made read-only meanwhile
        evict(root=root)


def cache_info(root: Path | None = None) -> dict:
    """``{"path", "max_bytes", "bytes", "entries", "folders": {name: {"bytes",
    "entries"}}}`` of the cache (temporary files count in ``bytes``)."""
    root = config.cache_dir() if root is None else root
    with _evictor_lock(root, wait=True):
        entries, kept = _scan(root, time.time(), tidy=False)
    folders: dict[str, dict[str, int]] = {}
    for entry in entries:
        row = folders.setdefault(entry.folder, {"bytes": 0, "entries": 0})
        row["bytes"] += entry.size
        row["entries"] += 1
    return {"path": str(root), "max_bytes": config.cache_max_bytes(),
            "bytes": kept + sum(e.size for e in entries), "entries": len(entries),
            "folders": dict(sorted(folders.items()))}


def clear(root: Path | None = None) -> int:
    """Remove every entry (temporary files of builds still running stay); return the
    bytes removed."""
    root = config.cache_dir() if root is None else root
    removed = 0
    with _evictor_lock(root, wait=True):
        entries, _ = _scan(root, time.time())
        for entry in entries:
            for path in entry.paths:
                trash = path.with_name(f"{_TRASH}{os.getpid()}-{path.name}")
                with contextlib.suppress(OSError):
                    os.rename(path, trash)
                    _remove(trash)
            removed += entry.size
    return removed
