"""The build cache's size cap (kiln.runtime.disk_cache, KILN_CACHE_MAX_MB): least recently used
entries go first, entries in use and writers' temporary files stay, nothing outside kiln's
folders is touched, one evictor runs at a time, and hits mark entries used."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kiln.driver.cli import main
from kiln.runtime import cc, config, disk_cache

MB = 1 << 20
HOUR = 3600.0


def _entry(root, relative, size, age):
    """A cache file of ``size`` bytes last used ``age`` seconds ago."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"k" * size)
    when = time.time() - age
    os.utime(path, (when, when))
    return path


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KILN_CACHE_MAX_MB", raising=False)
    return tmp_path


def test_the_least_recently_used_entries_go_until_90_percent_of_the_cap(cache):
    paths = {age: _entry(cache, f"cc/lib_{age}.so", MB, age * HOUR) for age in range(1, 9)}
    removed = disk_cache.evict(6 * MB)  # 8 MB: down to 5.4 MB, so the 3 oldest go
    assert removed == 3 * MB
    assert sorted(age for age, p in paths.items() if p.exists()) == [1, 2, 3, 4, 5]


def test_an_llvm_object_and_its_ir_are_one_entry(cache):
    old = [_entry(cache, f"llvm/aaaa.{ext}", MB, 5 * HOUR) for ext in ("o", "ll")]
    new = [_entry(cache, f"llvm/bbbb.{ext}", MB, HOUR) for ext in ("o", "ll")]
    build = _entry(cache, "build/cccc/meta.json", MB, 2 * HOUR).parent
    os.utime(build, (time.time() - 2 * HOUR,) * 2)
    # 5 MB down to 2.25: the old llvm pair, then the build folder
    assert disk_cache.evict(int(2.5 * MB)) == 3 * MB
    assert not any(p.exists() for p in old) and not build.exists()
    assert all(p.exists() for p in new)


def test_entries_in_use_temporary_files_and_other_folders_stay(cache):
    recent = _entry(cache, "build/recent/meta.json", 2 * MB, 0).parent
    writing = _entry(cache, "cc/tmpab12cd/lib.so", MB, 2 * HOUR).parent
    os.utime(writing, None)  # a writer is filling it now
    stale = _entry(cache, "lower/.tmp-x1y2", MB, 30 * HOUR)  # a crashed writer's
    leftover = _entry(cache, "cc/.evicted-123-lib_dead.so", MB, 0)  # a killed evictor's
    mine = [_entry(cache, "notes/old.txt", MB, 100 * HOUR), _entry(cache, "old.bin", MB,
                                                                     100 * HOUR)]
    assert disk_cache.evict(MB // 2) == 0  # over the cap, but all of it is in use
    assert recent.exists() and writing.exists() and all(p.exists() for p in mine)
    assert not stale.exists() and not leftover.exists()


def test_an_entry_touched_as_it_is_evicted_is_put_back(cache, monkeypatch):
    """A process finding the entry between the evictor's look and its rename marks it used:
    the evictor sees the fresh time on the renamed file and renames it back."""
    path = _entry(cache, "cc/lib_hit.so", 2 * MB, 5 * HOUR)
    rename = os.rename

    def reader_first(src, dst):
        if str(src) == str(path):
            disk_cache.touch(path)
        return rename(src, dst)

    monkeypatch.setattr(disk_cache.os, "rename", reader_first)
    assert disk_cache.evict(MB) == 0
    assert path.read_bytes() == b"k" * 2 * MB
    assert [p.name for p in path.parent.iterdir()] == ["lib_hit.so"]


_HOLD_LOCK = """
import fcntl, sys
lock = open(sys.argv[1], "a+b")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_one_evictor_at_a_time(cache):
    """While another process evicts (holds the lock) a second evictor skips its round."""
    path = _entry(cache, "cc/lib_old.so", 2 * MB, 5 * HOUR)
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(cache / ".evict.lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert disk_cache.evict(MB) == 0 and path.exists()
    finally:
        holder.communicate("", timeout=30)
    assert disk_cache.evict(MB) == 2 * MB and not path.exists()


def test_a_store_evicts_in_the_background_once_a_minute(cache, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "1")
    path = _entry(cache, "cc/lib_old.so", 2 * MB, 5 * HOUR)
    disk_cache.stored().join(60)
    assert not path.exists()
    again = _entry(cache, "cc/lib_older.so", 2 * MB, 6 * HOUR)
    assert disk_cache.stored() is None and again.exists()  # checked less than a minute ago
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "0")  # 0: no cap, no check
    os.utime(cache / ".evict.stamp", (0, 0))
    assert disk_cache.stored() is None and again.exists()


def test_a_hit_marks_the_shared_library_used(cache, monkeypatch):
    path = cc.cached_shared_library({"k.c": "int risks_answer(void) { return 42; }"},
                                    ["-O1", "-fPIC"])
    os.utime(path, (time.time() - 5 * HOUR,) * 2)
    compiles = []
    monkeypatch.setattr(cc, "run_compiler", lambda cmd, what: compiles.append(cmd))
    again = cc.cached_shared_library({"k.c": "int risks_answer(void) { return 42; }"},
                                     ["-O1", "-fPIC"])
    assert again == path and compiles == []
    assert time.time() - path.stat().st_mtime < 60


@pytest.mark.parametrize("text, megabytes", [
    ("", 2048), ("0", 0), ("1.5", 1.5), ("abc", 2048), ("-3", 2048), ("nan", 2048),
    ("inf", 2048)])
def test_the_cap_reads_kiln_cache_max_mb(monkeypatch, text, megabytes):
    monkeypatch.setenv("KILN_CACHE_MAX_MB", text)
    assert config.cache_max_bytes() == int(megabytes * MB)


def test_a_positive_cap_below_a_byte_still_caps(cache, monkeypatch, capsys):
    """A tiny positive cap is one byte (it rounded to 0, which turns eviction off)."""
    monkeypatch.setenv("KILN_CACHE_MAX_MB", "1e-9")
    assert config.cache_max_bytes() == 1
    old = _entry(cache, "cc/lib_a.so", MB, 5 * HOUR)
    assert main(["cache", "evict", "--max-mb", "1e-9"]) == 0
    assert "evicted 1.0 MB" in capsys.readouterr().out and not old.exists()


def test_the_cache_command_shows_evicts_and_clears(cache, capsys):
    _entry(cache, "cc/lib_a.so", MB, 5 * HOUR)
    _entry(cache, "llvm/b.o", 2 * MB, 4 * HOUR)
    keep = _entry(cache, "keep.txt", 10, 0)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"cache   {cache}" in out and "3.0 MB in 2 entries" in out
    assert "cap     2048.0 MB" in out and "llvm" in out
    assert main(["cache", "evict", "--max-mb", "2.5"]) == 0
    assert "evicted 1.0 MB" in capsys.readouterr().out
    assert main(["cache", "evict", "--max-mb", "-1"]) == 1
    assert "--max-mb must be a positive number" in capsys.readouterr().err
    assert main(["cache", "clear"]) == 0
    assert "removed 2.0 MB" in capsys.readouterr().out
    assert not any((cache / "cc").iterdir()) and not any((cache / "llvm").iterdir())
    assert keep.exists()


def test_a_read_only_cache_still_hits(cache, monkeypatch):
    """A cache this process may not write (shared, read-only): touching fails, the entry is
    still found, nothing is rebuilt."""
    path = _entry(cache, "cc/lib_shared.so", 10, HOUR)

    def refuse(*args, **kwargs):
        raise PermissionError("read-only cache")

    monkeypatch.setattr(disk_cache.os, "utime", refuse)
    assert disk_cache.touch(path)
    assert not disk_cache.touch(cache / "cc" / "lib_missing.so")


def test_kiln_cache_evict_says_what_it_does(cache, capsys):
    """Its help said "down to the cap"; eviction trims to 90% of the cap, and only when the
    cache is over it."""
    with pytest.raises(SystemExit):
        main(["cache", "--help"])
    assert "at 90% of it" in " ".join(capsys.readouterr().out.split())
    paths = [_entry(cache, f"cc/lib_{age}.so", MB, age * HOUR) for age in range(1, 11)]
    assert main(["cache", "evict", "--max-mb", "10"]) == 0  # at the cap: nothing goes
    assert "evicted 0.0 MB" in capsys.readouterr().out
    assert main(["cache", "evict", "--max-mb", "8"]) == 0  # 10 MB: to 7.2 MB, 3 oldest go
    assert "evicted 3.0 MB" in capsys.readouterr().out
    assert [p.exists() for p in paths] == [True] * 7 + [False] * 3
