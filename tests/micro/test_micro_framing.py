"""microTVM framing (kiln/micro/framing.py and the CRT's framing.c): hand-made wire bytes, the
Python and C framers and unframers against each other, and their error handling.
"""

from __future__ import annotations

import random
import struct
import subprocess

import pytest
from crt_testlib import C_TEST_DIR, build_program, run_program
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.micro.framing import Framer, Unframer, UnframerError, crc16_ccitt, frame_packet


def _crc_bitwise(data: bytes) -> int:
    """CRC-16/CCITT straight from its definition (poly 0x1021, init 0xFFFF, MSB first)."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


def test_crc_check_value():
    # The catalogued check value of CRC-16/CCITT-FALSE over "123456789".
    assert crc16_ccitt(b"123456789") == 0x29B1 == _crc_bitwise(b"123456789")


def test_hand_made_packet():
    # FE (after reset), FF FD, length 2 = 02 00 00 00, payload FF 01 -> FF FF 01, CRC over the
    # escaped bytes FF FD 02 00 00 00 FF FF 01, little endian.
    body = bytes.fromhex("fffd02000000ffff01")
    crc = _crc_bitwise(body)
    expected = b"\xfe" + body + struct.pack("<H", crc).replace(b"\xff", b"\xff\xff")
    assert frame_packet(b"\xff\x01") == expected
    assert frame_packet(b"\xff\x01", after_reset=False) == expected[1:]
    sent = []
    framer = Framer(sent.append)
    framer.write(b"\xff\x01")
    framer.write(b"\xff\x01")
    assert sent == [expected, expected[1:]]


def test_unframer_drops_padding_and_noise():
    packet = frame_packet(b"abc", after_reset=False)
    # Noise before the packet, padding (FF FE) inside the length field, a lone FE between.
    padded = packet[:3] + b"\xff\xfe" + packet[3:]
    # The CRC covers the padding too (it is computed over wire bytes), so rebuild it.
    crc = crc16_ccitt(padded[:-2])
    padded = padded[:-2] + struct.pack("<H", crc).replace(b"\xff", b"\xff\xff")
    unframer = Unframer()
    assert unframer.feed(b"\x00junk\xfe" + padded + b"\xfe" + packet) == [b"abc", b"abc"]
    assert unframer.events == []


@pytest.mark.parametrize(
    "wire, error",
    [
        (b"\xff\xfd\x05\x00", UnframerError.SHORT_PACKET),
        (b"\xff\xfd\x01\x00\x00\x00\xff\x07", UnframerError.INVALID_ESCAPE),
        (b"\xff\xfd\x00\x00\x01\x00", UnframerError.PAYLOAD_OVERFLOW),
        (b"\xff\xfd\x01\x00\x00\x00\x41\x00\x00", UnframerError.BAD_CRC),
    ],
    ids=["short", "escape", "overflow", "crc"],
)
def test_unframer_errors_then_recovers(wire, error):
    unframer = Unframer(max_payload=1024)
    good = frame_packet(b"ok", after_reset=False)
    assert unframer.feed(wire + good) == [b"ok"]
    assert [e for e, _ in unframer.events] == [error]


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    out = tmp_path_factory.mktemp("framing")
    return build_program(
        out, "framing_tool", [C_TEST_DIR / "framing_tool.c"],
        components=("common", "memory", "microtvm_rpc_common"),
    )


def _run(tool, *args, stdin: bytes) -> bytes:
    proc = subprocess.run([str(tool), *args], input=stdin, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout


def _python_outcomes(wire: bytes, capacity: int) -> list[str]:
    """The Python unframer's outcomes in order (fed byte by byte: one outcome per byte)."""
    unframer, lines = Unframer(max_payload=capacity), []
    names = {
        UnframerError.SHORT_PACKET: "201", UnframerError.INVALID_ESCAPE: "202",
        UnframerError.PAYLOAD_OVERFLOW: "203",
    }
    for i in range(len(wire)):
        seen = len(unframer.events)
        for payload in unframer.feed(wire[i:i + 1]):
            lines.append(f"packet 1 {payload.hex()}")
        for error, _ in unframer.events[seen:]:
            lines.append("packet 0 " if error is UnframerError.BAD_CRC else f"error {names[error]}")
    return lines


def _c_outcomes(tool, wire: bytes, chunk: int, capacity: int) -> list[str]:
    lines = _run(tool, "unframe", str(chunk), str(capacity), stdin=wire).decode().splitlines()
    # A bad-CRC packet: C prints its payload, Python only its length; compare the fact.
    return ["packet 0 " if line.startswith("packet 0") else line for line in lines]


def test_c_framer_matches_python(tool):
    rng = random.Random(0)
    payloads = [b"", b"\xff", b"\xff\xff\xfd\xfe", bytes(range(256))] + [
        rng.randbytes(rng.randrange(300)) for _ in range(20)
    ]
    stdin = b"".join(struct.pack("<I", len(p)) + p for p in payloads)
    expected = b"".join(frame_packet(p, after_reset=i == 0) for i, p in enumerate(payloads))
    for chunk in (1, 7, 4096):
        assert _run(tool, "frame", str(chunk), stdin=stdin) == expected
    assert Unframer().feed(expected) == payloads


def test_c_framer_state_errors(tool):
    proc = run_program(tool, "misuse")
    assert proc.returncode == 0 and "ok misuse" in proc.stdout, proc.stdout + proc.stderr


def _mutate(rng: random.Random, wire: bytes) -> bytes:
    data = bytearray(wire)
    for _ in range(rng.randrange(1, 6)):
        at = rng.randrange(len(data) + 1)
        op = rng.randrange(4)
        if op == 0 and data:
            data[min(at, len(data) - 1)] = rng.choice([0xFF, 0xFE, 0xFD, rng.randrange(256)])
        elif op == 1:
            data[at:at] = rng.choice([b"\xff", b"\xff\xfd", b"\xff\xfe", b"\xfe"])
        elif op == 2:
            del data[at:at + rng.randrange(1, 4)]
        else:
            data[at:at] = rng.randbytes(rng.randrange(1, 4))
    return bytes(data)


def test_c_and_python_unframers_agree_on_damaged_streams(tool):
    rng = random.Random(1)
    for case in range(30):
        payloads = [rng.randbytes(rng.randrange(40)) for _ in range(rng.randrange(1, 5))]
        wire = b"".join(frame_packet(p, after_reset=i == 0) for i, p in enumerate(payloads))
        if case % 3:
            wire = _mutate(rng, wire)
        capacity = rng.choice([16, 64])
        expected = _python_outcomes(wire, capacity)
        for chunk in (1, 5, 1000):
            assert _c_outcomes(tool, wire, chunk, capacity) == expected, (case, chunk, wire.hex())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=6), st.lists(st.integers(1, 50), min_size=1))
def test_python_round_trip_any_split(payloads, splits):
    wire = b"".join(frame_packet(p, after_reset=i == 0) for i, p in enumerate(payloads))
    unframer, got, at, k = Unframer(), [], 0, 0
    while at < len(wire):
        step = splits[k % len(splits)]
        got += unframer.feed(wire[at:at + step])
        at, k = at + step, k + 1
    assert got == payloads and unframer.events == []


def test_unframer_fuzz_smoke(tmp_path):
    """A short run of tests/fuzz/micro_framing.py: damaged streams never trip ASan/UBSan."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "fuzz" / "micro_framing.py"
    spec = importlib.util.spec_from_file_location("micro_framing", path)
    campaign = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(campaign)
    totals = campaign.run(inputs=20000, seed=1, out_dir=tmp_path, log=lambda _: None)
    assert totals["inputs"] == 20000
    # Every outcome is reached: good packets, CRC failures and each kind of framing error.
    assert totals["packets"] > 10000 and totals["bad_crc"] > 100 and totals["errors"] > 1000
    assert not (tmp_path / "finding.bin").exists()
