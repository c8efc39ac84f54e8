"""Fuzz campaigns: mutated inputs fed to a loader in worker processes that may crash or hang.

Entry points: :func:`run_campaign`, :func:`run_inputs`, :class:`Stats`.

The campaign process generates inputs (deterministically from ``seed``), sends each to a
worker (:mod:`tests.fuzz.worker`) and classifies the outcome: ``ok`` (loaded), ``tvm`` (a
``TVMError``: the expected answer to bad input), ``bare`` (any other exception), ``crash``
(the worker died) or ``hang`` (no answer within the target's timeout, confirmed by a retry in
a fresh worker with ``retry_factor`` times the time; inputs that pass on the retry count as
``slow``). Every input that was not ``ok``/``tvm`` is written to
``out_dir/<target>/<outcome>-<sha1>.bin`` with a ``.txt`` beside it naming the error, and the
worker is restarted.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .mutate import mutate
from .targets import Target, get_target

REPO = Path(__file__).resolve().parents[2]
FINDINGS = ("bare", "crash", "hang")
_STARTUP_TIMEOUT = 600.0
_MAX_CORPUS = 256
_MAX_CACHE_BYTES = 256 << 20  # a worker may build a model (and compile it) before its first input


@dataclass
class Stats:
    """What one campaign saw: outcome counts, and the recorded findings (path, summary)."""

    target: str
    counts: Counter = field(default_factory=Counter)
    findings: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    slow: int = 0  # inputs that passed the hang limit only on a retry

    @property
    def inputs(self) -> int:
        return sum(self.counts.values())

    @property
    def clean(self) -> bool:
        return not any(self.counts[kind] for kind in FINDINGS)

    def line(self) -> str:
        parts = " ".join(f"{k}={self.counts[k]}" for k in ("ok", "tvm", *FINDINGS))
        return (f"{self.target:15s} inputs={self.inputs:<7d} {parts} slow={self.slow} "
                f"({self.seconds:.0f} s)")


class _Worker:
    """One worker process for a target; restarted after a crash or hang."""

    def __init__(self, target: Target, env: dict[str, str], nice: int) -> None:
        self.target, self.env, self.nice = target, env, nice
        self.stderr = tempfile.TemporaryFile()
        self.proc: subprocess.Popen | None = None
        self.served = 0

    def start(self) -> None:
        cache = Path(self.env["KILN_CACHE_DIR"])
        if cache.parent == Path(self.env["TMPDIR"]) and _size(cache) > _MAX_CACHE_BYTES:
            shutil.rmtree(cache, ignore_errors=True)  # ours alone; the next worker refills it
        self.stderr.seek(0)
        self.stderr.truncate()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fuzz.worker", self.target.name], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=self.env,
            preexec_fn=(lambda: os.nice(self.nice)) if self.nice else None)
        self.served = 0
        reply = self._read(_STARTUP_TIMEOUT)
        if reply is None or reply.get("status") != "ready":
            raise RuntimeError(f"fuzz worker for {self.target.name} did not start: "
                               f"{reply}\n{self.stderr_tail()}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read()[-4000:].decode("utf-8", "replace")

    def _read(self, timeout: float) -> dict | None:
        """The worker's next answer; None when it died (EOF) or took longer than ``timeout``."""
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return {"status": "hang"}
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def feed(self, data: bytes) -> dict:
        """Load one input; a hang is confirmed in a fresh worker with a longer limit."""
        reply = self._feed_once(data, self.target.timeout)
        if reply["status"] == "hang":
            # A niced worker on a busy machine can stall for seconds (or be importing
            # lazily loaded modules): only an input that also hangs with retry_factor
            # times the time, alone in a new worker, counts.
            limit = self.target.timeout * self.target.retry_factor
            retry = self._feed_once(data, limit)
            if retry["status"] != "hang":
                retry["slow"] = True
                return retry
            retry["message"] = (f"no answer within {self.target.timeout} s, nor within "
                                f"{limit} s in a fresh worker")
            return retry
        return reply

    def _feed_once(self, data: bytes, timeout: float) -> dict:
        if self.proc is None or self.served >= self.target.restart_every:
            self.stop()
            self.start()
        self.served += 1
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(struct.pack("<I", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died; reading gives EOF
        reply = self._read(timeout)
        if reply is None:
            self.proc.wait()
            reply = {"status": "crash", "type": f"exit status {self.proc.returncode}",
                     "message": self.stderr_tail()}
            self.proc = None
        elif reply["status"] == "hang":
            self.stop()
        return reply


def _fast_scratch_root() -> str | None:
    """A tmpfs directory for scratch files (/dev/shm), or None for the default temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) \
        if folder.is_dir() else 0


def _record(out_dir: Path, target: str, data: bytes, reply: dict) -> str:
    folder = out_dir / target
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{reply['status']}-{hashlib.sha1(data).hexdigest()[:16]}"
    (folder / f"{stem}.bin").write_bytes(data)
    (folder / f"{stem}.txt").write_text(
        f"{reply['status']}: {reply.get('type', '')}\n{reply.get('message', '')}\n")
    return str(folder / f"{stem}.bin")


def run_inputs(name: str, inputs: Iterable[bytes], out_dir: str | os.PathLike | None = None,
               nice: int = 0, progress: bool = False,
               on_result: Callable[[int, bytes, str], None] | None = None) -> Stats:
    """Feed each of ``inputs`` to loader ``name`` in a worker; count and record outcomes.

    ``on_result(index, data, status)`` sees every outcome (campaigns grow their corpus).
    """
    target = get_target(name)
    out = Path(out_dir) if out_dir is not None else REPO / "tests" / "fuzz" / "findings"
    stats = Stats(name)
    # Scratch space on tmpfs where there is one: unpacking an archive per input is disk-bound
    # (rmdir alone took 5 ms a directory here). It holds the workers' temporary files and a
    # private build cache (mutated archives compile), emptied when it grows past a limit.
    scratch = tempfile.TemporaryDirectory(prefix="kiln_fuzz_", dir=_fast_scratch_root())
    env = {**os.environ, "TMPDIR": scratch.name, "PYTHONPATH": str(REPO),
           "KILN_CACHE_DIR": os.environ.get("KILN_CACHE_DIR",
                                            os.path.join(scratch.name, "cache"))}
    worker = _Worker(target, env, nice)
    start = last_report = time.monotonic()
    try:
        for index, data in enumerate(inputs):
            reply = worker.feed(data)
            status = reply["status"]
            stats.counts[status] += 1
            if reply.get("slow"):  # kept to look at: a slow loader, or just a busy host
                stats.slow += 1
                _record(out, name, data, {**reply, "status": f"slow-{status}"})
            if status in FINDINGS:
                path = _record(out, name, data, reply)
                summary = f"{reply.get('type', '')}: {reply.get('message', '')}".strip()
                stats.findings.append((path, (summary.splitlines() or [""])[0][:200]))
            if on_result is not None:
                on_result(index, data, status)
            if progress and time.monotonic() - last_report > 60:
                last_report = time.monotonic()
                stats.seconds = last_report - start
                print(stats.line(), flush=True)
    finally:
        worker.stop()
        scratch.cleanup()
    stats.seconds = time.monotonic() - start
    return stats


def run_campaign(name: str, inputs: int | None = None, seconds: float | None = None,
                 seed: int = 0, out_dir: str | os.PathLike | None = None, nice: int = 0,
                 progress: bool = False) -> Stats:
    """Fuzz loader ``name`` with ``inputs`` mutated inputs, or for ``seconds``.

    The seeds themselves go first (they must load); mutants that still load join the
    corpus. Inputs derive from ``seed`` alone. ``nice`` lowers the workers' priority (long
    campaigns on a shared machine use 19).
    """
    if inputs is None and seconds is None:
        raise ValueError("give inputs= or seconds=")
    target = get_target(name)
    rng = random.Random(seed)
    corpus = target.seeds()
    seeds = len(corpus)
    largest_seed = max(map(len, corpus))
    start = time.monotonic()

    def generate() -> Iterator[bytes]:
        for index in range(1 << 62):
            if (inputs is not None and index >= inputs) or (
                    seconds is not None and time.monotonic() - start >= seconds):
                return
            yield corpus[index] if index < seeds else mutate(
                rng.choice(corpus), rng, target.text, corpus)

    def grow(index: int, data: bytes, status: str) -> None:
        if index < seeds and status != "ok":
            raise RuntimeError(f"seed {index} of {name} does not load ({status})")
        if status == "ok" and index >= seeds and len(corpus) < _MAX_CORPUS \
                and len(data) <= largest_seed * 4:  # growing inputs would slow every run
            corpus.append(data)  # a mutant that still loads reaches deeper next time

    return run_inputs(name, generate(), out_dir, nice, progress, grow)
