"""TVM's ``tvm.contrib.utils``: temporary directories for build artifacts, and ``which``.

Entry points: :func:`tempdir`, :class:`TempDirectory`, :func:`which`, :func:`is_source_path`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["TempDirectory", "tempdir", "which", "is_source_path",
           "DirectoryCreatedPastAtExit"]


class DirectoryCreatedPastAtExit(Exception):
    """A TempDirectory was requested after interpreter shutdown began."""


class TempDirectory:
    """A directory removed when the object is collected (or at exit), unless kept for debug.

    ``TempDirectory.set_keep_for_debug()`` (or ``keep_for_debug=True``) keeps the directories,
    as TVM's does, for inspecting generated code.

    Example
    -------
    >>> temp = TempDirectory()
    >>> path = temp.relpath("lib.so")
    >>> path.endswith("lib.so")
    True
    """

    _KEEP_FOR_DEBUG = False
    _REMOVED_AT_EXIT = False
    _live: set[str] = set()

    @classmethod
    def set_keep_for_debug(cls, set_to: bool = True) -> Any:
        """Keep every temporary directory made from now on; returns a context manager that
        restores the previous setting when used with ``with``."""
        old, cls._KEEP_FOR_DEBUG = cls._KEEP_FOR_DEBUG, set_to

        class _Restore:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                cls._KEEP_FOR_DEBUG = old

        return _Restore()

    @classmethod
    def remove_tempdirs(cls) -> None:
        """Remove every live temporary directory (run at interpreter exit)."""
        for path in list(cls._live):
            shutil.rmtree(path, ignore_errors=True)
        cls._live.clear()
        cls._REMOVED_AT_EXIT = True

    def __init__(self, custom_path: str | None = None, keep_for_debug: bool | None = None):
        if self._REMOVED_AT_EXIT:
            raise DirectoryCreatedPastAtExit()
        self._created_with_keep_for_debug = (
            self._KEEP_FOR_DEBUG if keep_for_debug is None else keep_for_debug)
        if custom_path:
            os.mkdir(custom_path)
            self.temp_dir = os.path.realpath(custom_path)
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="kiln-")
        if not self._created_with_keep_for_debug:
            TempDirectory._live.add(self.temp_dir)

    @property
    def path(self) -> Path:
        """The directory as a :class:`pathlib.Path`."""
        return Path(self.temp_dir)

    def __truediv__(self, other: Any) -> Path:
        return self.path / os.fspath(other)

    def relpath(self, name: str) -> str:
        """The absolute path of ``name`` inside the directory."""
        return os.path.join(self.temp_dir, name)

    def listdir(self) -> list[str]:
        """The names of the files in the directory."""
        return os.listdir(self.temp_dir)

    def remove(self) -> None:
        """Delete the directory now (unless it is kept for debug)."""
        if self.temp_dir and not self._created_with_keep_for_debug:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            TempDirectory._live.discard(self.temp_dir)
            self.temp_dir = None

    def __del__(self):
        if getattr(self, "temp_dir", None) and not TempDirectory._REMOVED_AT_EXIT:
            self.remove()

    def __repr__(self) -> str:
        return f"TempDirectory({self.temp_dir!r})"


atexit.register(TempDirectory.remove_tempdirs)


def tempdir(custom_path: str | None = None, keep_for_debug: bool | None = None) -> TempDirectory:
    """Create a :class:`TempDirectory` (TVM's ``tvm.contrib.utils.tempdir``)."""
    return TempDirectory(custom_path, keep_for_debug)


def which(exec_name: str) -> str | None:
    """The full path of executable ``exec_name`` on ``PATH``, or None."""
    return shutil.which(exec_name)


def is_source_path(path: str) -> bool:
    """Whether ``path`` names an existing file or looks like a path (has a ``.`` or ``/``)."""
    if os.path.exists(path):
        return True
    if path.find("\n") != -1:
        return False
    suffix = path.rsplit(".", 1)
    return len(suffix) == 2 or "/" in path
