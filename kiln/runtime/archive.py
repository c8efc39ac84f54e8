"""Reading archives as data: the one safe tar extraction every kiln archive reader uses.

Entry points: :func:`safe_extract`, :func:`extracted`.

An archive is untrusted input (a ``.tar`` module, a Model Library Format file, an uploaded
RPC file, a micro project). Python's ``tarfile.extractall`` follows whatever the member headers
say: absolute names, ``..`` components, symbolic and hard links and device nodes all let a
crafted archive write or read outside the directory it is unpacked into. :func:`safe_extract`
checks every member first and refuses the whole archive when one is not a plain file or
directory with a clean relative name; then it writes the files itself, with ``O_EXCL`` and
``O_NOFOLLOW``, into a fresh directory only the current user can enter. Sizes and member
counts are capped, so a small compressed archive cannot fill the disk.

Example
-------
>>> import io, tarfile, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "a.tar")
>>> with tarfile.open(path, "w") as tar:
...     info = tarfile.TarInfo("src/a.c"); data = b"int x;"; info.size = len(data)
...     tar.addfile(info, io.BytesIO(data))
>>> with extracted(path) as root:
...     print(sorted(str(p.relative_to(root)) for p in root.rglob("*")))
['src', 'src/a.c']
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from kiln.runtime.error import TVMError

__all__ = ["safe_extract", "extracted", "MAX_ARCHIVE_BYTES", "MAX_ARCHIVE_MEMBERS"]

MAX_ARCHIVE_BYTES = 1 << 30  # what all members together may hold once unpacked
MAX_ARCHIVE_MEMBERS = 100_000
_MAX_NAME_BYTES = 4096
_CHUNK = 1 << 20


def _fail(archive: str, message: str) -> TVMError:
    return TVMError(f"cannot extract archive {archive!r}: {message}")


def _clean_name(archive: str, member: tarfile.TarInfo) -> PurePosixPath:
    """The member's name as a relative path with no ``..``, or a TVMError saying why not."""
    name = member.name
    if not name or len(name.encode("utf-8", "surrogateescape")) > _MAX_NAME_BYTES:
        raise _fail(archive, f"member name {name[:80]!r} is empty or too long")
    if "\0" in name or "\\" in name:
        raise _fail(archive, f"member name {name!r} holds a NUL byte or a backslash")
    path = PurePosixPath(name)
    if path.is_absolute():
        raise _fail(archive, f"member {name!r} has an absolute path")
    parts = [part for part in path.parts if part != "."]
    if ".." in parts:
        raise _fail(archive, f"member {name!r} has a '..' component")
    if not parts:
        raise _fail(archive, f"member name {name!r} names no file")
    return PurePosixPath(*parts)


def _check_members(archive: str, tar: tarfile.TarFile,
                   max_bytes: int) -> list[tuple[tarfile.TarInfo, PurePosixPath]]:
    checked, seen, total = [], set(), 0
    for count, member in enumerate(tar, 1):  # header by header: a bomb stops at the cap
        if count > MAX_ARCHIVE_MEMBERS:
            raise _fail(archive, f"it has more than {MAX_ARCHIVE_MEMBERS} members")
        if member.issym() or member.islnk():
            raise _fail(archive, f"member {member.name!r} is a link (to {member.linkname!r})")
        if not (member.isfile() or member.isdir()):
            raise _fail(archive, f"member {member.name!r} is not a regular file or directory "
                                 "(device, FIFO or other special file)")
        if member.isdir() and member.name.strip("/") in (".", ""):
            continue  # the root itself (Model Library Format archives start with ".")
        path = _clean_name(archive, member)
        if member.isfile():
            if path in seen:
                raise _fail(archive, f"member {member.name!r} appears twice")
            seen.add(path)
            total += member.size
            if total > max_bytes:
                raise _fail(archive, f"its members hold more than {max_bytes} bytes")
        checked.append((member, path))
    files = {path for member, path in checked if member.isfile()}
    for path in files:
        for parent in path.parents:
            if parent in files:
                raise _fail(archive, f"member {str(path)!r} lies under the file {str(parent)!r}")
    return checked


def safe_extract(archive: str | os.PathLike, directory: str | os.PathLike | None = None,
                 max_bytes: int = MAX_ARCHIVE_BYTES) -> Path:
    """Unpack a tar archive (plain or compressed) into a fresh private directory; return it.

    Every member must be a regular file or a directory with a relative name free of ``..``
    components; links, devices, FIFOs, absolute names, duplicates and archives unpacking to
    more than ``max_bytes`` are refused with a :class:`TVMError` naming the member, before
    anything is written. ``directory`` (default: a new ``tempfile.mkdtemp``) must not exist
    yet or be empty; it is created with mode 0700. Files get mode 0600 (0700 when the archive
    marks them executable); owners, times and other mode bits in the archive are ignored.
    The caller owns the directory (see :func:`extracted` for one removed afterwards).
    """
    archive = os.fspath(archive)
    try:
        with tarfile.open(archive) as tar:
            checked = _check_members(archive, tar, max_bytes)
            root = _fresh_directory(archive, directory)
            try:
                for member, path in checked:
                    _write_member(archive, tar, member, root / path)
            except BaseException:
                shutil.rmtree(root, ignore_errors=True)
                raise
    except tarfile.TarError as err:
        raise _fail(archive, f"not a valid tar archive ({err})") from None
    except (OSError, EOFError, UnicodeError, ValueError) as err:
        if isinstance(err, FileNotFoundError) and not os.path.exists(archive):
            raise TVMError(f"cannot extract archive {archive!r}: no such file") from None
        raise _fail(archive, f"{type(err).__name__}: {err}") from None
    return root


def _fresh_directory(archive: str, directory: str | os.PathLike | None) -> Path:
    if directory is None:
        return Path(tempfile.mkdtemp(prefix="kiln_archive_"))  # mode 0700 by definition
    root = Path(directory)
    if root.is_symlink() or (root.exists() and (not root.is_dir() or any(root.iterdir()))):
        raise _fail(archive, f"destination {str(root)!r} exists and is not an empty directory")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    return root


def _write_member(archive: str, tar: tarfile.TarFile, member: tarfile.TarInfo,
                  target: Path) -> None:
    # Parents are created here (not trusted from directory members); none of them can be a
    # link, since only this function creates entries under the fresh root.
    if member.isdir():
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        return
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = 0o700 if member.mode & stat.S_IXUSR else 0o600
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    source = tar.extractfile(member)
    if source is None:
        raise _fail(archive, f"member {member.name!r} has no data")
    written = 0
    with source, os.fdopen(os.open(target, flags, mode), "wb") as out:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            out.write(chunk)
    if written != member.size:
        raise _fail(archive, f"member {member.name!r} declares {member.size} bytes but the "
                             f"archive holds {written}; it is truncated")


@contextlib.contextmanager
def extracted(archive: str | os.PathLike, max_bytes: int = MAX_ARCHIVE_BYTES) -> Iterator[Path]:
    """:func:`safe_extract` into a fresh private directory, removed when the block ends."""
    root = safe_extract(archive, max_bytes=max_bytes)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)
