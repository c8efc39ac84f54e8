"""Fuzz the RPC server's packet parser and dispatcher (kiln.rpc.serving) with mutated streams.

A mutation fuzzer in Python: seeds are valid request streams a client sends (InitServer,
function lookups and calls with every argument type, allocations, copies, frees, files,
shutdown), in both packed-sequence encodings; each input is one mutated stream fed to a fresh
:class:`~kiln.rpc.serving.ServingSession` over an in-memory channel. An input passes when the
session ends normally or raises ``RPCError`` (the server drops it); anything else escaping
the session (IndexError, struct.error, TypeError, ...) or an input slower than a second is a
finding: the run stops and saves it.

Usage::

    python -m tests.fuzz.rpc_frames --inputs 100000
    python -m tests.fuzz.rpc_frames --inputs 100000 --seed 7 --out /tmp/rpc-fuzz
    python -m tests.fuzz.rpc_frames --inputs 20000 --transport socket   # the C serve loop

tests/rpc/test_rpc_fuzz_smoke.py runs a few thousand inputs of the same campaign.
"""

from __future__ import annotations

import argparse
import random
import shutil
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import kiln  # noqa: E402
from kiln.rpc.protocol import (  # noqa: E402
    CODECS,
    PROTOCOL_VERSION,
    Channel,
    ChannelClosed,
    RPCCode,
    SocketChannel,
    TensorMeta,
    Writer,
)
from kiln.rpc.serving import ServingSession  # noqa: E402
from kiln.runtime.device import Device  # noqa: E402
from kiln.runtime.dtype import DataType  # noqa: E402
from kiln.runtime.error import RPCError  # noqa: E402
from kiln.runtime.packed_func import TypeCode  # noqa: E402

kiln.register_func("rpc_fuzz.echo", lambda *args: args[0] if args else None, override=True)
_FIRST_HANDLE = 0x20  # the server's first handle (0x10 + 16): lets seeds call what they looked up
_INTERESTING = [0, 1, 2, 4, 7, 8, 9, 11, 13, 64, 65, 70, 0x7F, 0xFF, 0x7FFFFFFF, 0xFFFFFFFF,
                1 << 31, 1 << 32, (1 << 63) - 1, (1 << 64) - 1]


class MemoryChannel(Channel):
    """A channel reading a fixed byte string; what the server sends is counted, not kept."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos, self.sent = memoryview(data), 0, 0

    def send(self, *parts) -> None:
        self.sent += sum(len(p) for p in parts)

    def recv_into(self, view: memoryview) -> None:
        n = min(len(view), len(self.data) - self.pos)
        view[:n] = self.data[self.pos:self.pos + n]
        self.pos += n
        if n < len(view):
            raise ChannelClosed("end of fuzz input", n)


def _packet(code: int, build=None, codec=None) -> bytes:
    writer = Writer(codec)
    if build is not None:
        build(writer)
    return b"".join(bytes(p) for p in writer.packet(code))


def seed_streams() -> list[bytes]:
    """Valid request streams, one per scenario and encoding."""
    seeds = []
    for codec in CODECS.values():
        def seq(values, codec=codec):
            return lambda w: w.packed_seq(values)

        init = _packet(RPCCode.kInitServer,
                       lambda w: (w.string(PROTOCOL_VERSION.encode()), w.i32(0)), codec)
        lookup = _packet(RPCCode.kGetGlobalFunc, seq([(TypeCode.STR, "rpc_fuzz.echo")]),
                         codec)
        cpu = Device(1, 0)
        meta = TensorMeta(0x1000, cpu, (2, 3), DataType("float32"))
        calls = [
            [(TypeCode.INT, -5)], [(TypeCode.FLOAT, 2.5)], [(TypeCode.STR, "héllo")],
            [(TypeCode.BYTES, b"\0\1\2")], [(TypeCode.NULL, None)],
            [(TypeCode.DATATYPE, DataType("int8x4"))], [(TypeCode.DEVICE, cpu)],
            [(TypeCode.DLTENSOR_HANDLE, meta)], [(TypeCode.HANDLE, 0x20)],
            [(TypeCode.PACKED_FUNC_HANDLE, _FIRST_HANDLE)],
            [(TypeCode.MODULE_HANDLE, _FIRST_HANDLE)],
        ]
        for args in calls:
            def call(w, args=args):
                w.u64(_FIRST_HANDLE)
                w.packed_seq(args)
            seeds.append(init + lookup + _packet(RPCCode.kCallFunc, call, codec)
                         + _packet(RPCCode.kFreeHandle,
                                   seq([(TypeCode.HANDLE, _FIRST_HANDLE), (TypeCode.INT, 10)]),
                                   codec)
                         + _packet(RPCCode.kShutdown))
        alloc = _packet(RPCCode.kDevAllocData,
                        seq([(TypeCode.DEVICE, cpu), (TypeCode.INT, 24), (TypeCode.INT, 64),
                             (TypeCode.DATATYPE, DataType("float32"))]), codec)
        copy_to = _packet(RPCCode.kCopyToRemote,
                          lambda w, m=meta: (w.tensor(m), w.u64(24), w.raw(bytes(range(24)))),
                          codec)
        copy_from = _packet(RPCCode.kCopyFromRemote, lambda w, m=meta: (w.tensor(m), w.u64(24)),
                            codec)
        among = _packet(RPCCode.kCopyAmongRemote,
                        seq([(TypeCode.DLTENSOR_HANDLE, meta), (TypeCode.DLTENSOR_HANDLE, meta),
                             (TypeCode.NULL, None)]), codec)
        free = _packet(RPCCode.kDevFreeData, seq([(TypeCode.DEVICE, cpu),
                                                  (TypeCode.HANDLE, 0x1000)]), codec)
        attr = _packet(RPCCode.kDevGetAttr, seq([(TypeCode.DEVICE, cpu), (TypeCode.INT, 0)]),
                       codec)
        seeds.append(init + alloc + copy_to + copy_from + among + free + attr)
        upload = _packet(RPCCode.kGetGlobalFunc, seq([(TypeCode.STR, "tvm.rpc.server.upload")]),
                         codec)
        write = _packet(RPCCode.kCallFunc, lambda w: (w.u64(_FIRST_HANDLE), w.packed_seq(
            [(TypeCode.STR, "a/b.txt"), (TypeCode.BYTES, b"data")])), codec)
        seeds.append(init + upload + write + _packet(RPCCode.kShutdown))
        # argument-less and number-argument calls: what the server's C loop answers itself
        nop = _packet(RPCCode.kGetGlobalFunc, seq([(TypeCode.STR, "testing.nop")]), codec)
        calls = [(_FIRST_HANDLE, []), (_FIRST_HANDLE + 16, []),
                 (_FIRST_HANDLE + 16, [(TypeCode.INT, 3), (TypeCode.FLOAT, 1.5),
                                       (TypeCode.NULL, None)])]
        seeds.append(init + lookup + nop + b"".join(
            _packet(RPCCode.kCallFunc, lambda w, h=h, a=a: (w.u64(h), w.packed_seq(a)), codec)
            for h, a in calls) + _packet(RPCCode.kShutdown))
    return seeds


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four random edits: bit flips, byte sets, interesting integers, cuts, splices."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(6)
        pos = rng.randrange(len(buf)) if buf else 0
        if kind == 0 and buf:
            buf[pos] ^= 1 << rng.randrange(8)
        elif kind == 1 and buf:
            buf[pos] = rng.randrange(256)
        elif kind == 2 and len(buf) >= 8:
            value = rng.choice(_INTERESTING)
            width = rng.choice((4, 8))
            pos = min(pos - pos % 4, len(buf) - width)
            buf[pos:pos + width] = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        elif kind == 3:
            del buf[pos:]  # truncation
        elif kind == 4:
            end = pos + rng.randint(1, 16)
            del buf[pos:end]
        else:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return bytes(buf)


def serve_one(data: bytes, codec_name: str, workdir: Path, transport: str = "memory") -> str:
    """``"ok"`` or ``"rejected"``; raises on a finding. ``transport="socket"`` serves over
    loopback TCP, where the session's C loop (kiln/runtime/src/rpc_serve.c) reads first."""
    client = None
    if transport == "memory":
        channel = MemoryChannel(data)
    else:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.create_connection(listener.getsockname())
            conn, _ = listener.accept()
        client.sendall(data)  # small: fits the socket buffers before anyone reads
        client.shutdown(socket.SHUT_WR)
        channel = SocketChannel(conn, 1.0)
    try:
        ServingSession(channel, workdir, codec=CODECS[codec_name]).serve()
    except RPCError:
        return "rejected"
    finally:
        if client is not None:
            channel.close()
            client.close()
    return "ok"


def run(inputs: int, seed: int, out_dir: Path, log=print, transport: str = "memory") -> dict:
    """Fuzz ``inputs`` mutated streams over ``transport`` (see :func:`serve_one`); counts of
    outcomes (a finding raises AssertionError)."""
    rng = random.Random(seed)
    seeds = seed_streams()
    counts = {"inputs": 0, "ok": 0, "rejected": 0}
    workdir = Path(tempfile.mkdtemp(prefix="rpc-fuzz-work-"))
    try:
        for index in range(inputs):
            codec_name = rng.choice(sorted(CODECS))
            data = mutate(rng.choice(seeds), rng)
            start = time.perf_counter()
            try:
                outcome = serve_one(data, codec_name, workdir, transport)
            except Exception:
                (out_dir / "finding.bin").write_bytes(data)
                raise AssertionError(f"input {index} ({codec_name}) escaped the session; saved "
                                     f"to {out_dir / 'finding.bin'}:\n"
                                     f"{traceback.format_exc()}") from None
            if time.perf_counter() - start > 0.2:
                log(f"slow input {index}: {time.perf_counter() - start:.2f}s {data[:80].hex()}")
            if time.perf_counter() - start > 1.0:
                (out_dir / "finding.bin").write_bytes(data)
                raise AssertionError(f"input {index} took over a second")
            counts["inputs"] += 1
            counts[outcome] += 1
            if index and index % 10000 == 0:
                log(f"{index} inputs: {counts}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="where a finding is saved")
    parser.add_argument("--transport", choices=["memory", "socket"], default="memory",
                        help="socket: over loopback TCP, through the server's C loop")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="rpc-fuzz-"))
    out.mkdir(parents=True, exist_ok=True)
    counts = run(args.inputs, args.seed, out, transport=args.transport)
    print(f"{counts['inputs']} inputs: {counts['ok']} served to the end, {counts['rejected']} "
          "rejected with RPCError, 0 findings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
