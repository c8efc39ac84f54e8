"""microTVM's framing layer: packets over an unreliable byte stream (a UART), as in TVM v0.16.

A packet on the wire is ``FF FD`` + u32 LE payload length + payload + u16 LE CRC, where the
length, payload and CRC are *escaped*: a literal ``0xFF`` is sent as ``FF FF``; ``FF FE`` is
padding that the receiver drops; ``FF FD`` inside a packet abandons it (the sender restarted).
The CRC is CRC-16/CCITT (poly 0x1021, init 0xFFFF) over the escaped wire bytes from ``FF FD``
through the end of the payload. A framer that was reset first sends one lone ``FE`` so that a
receiver stuck after a stray ``FF`` resynchronises.

The C twin is ``src/runtime/crt/microtvm_rpc_common/framing.c``; the two are tested against
each other (tests/micro/test_micro_framing.py).

Entry points: :class:`Framer`, :class:`Unframer`, :func:`frame_packet`, :func:`crc16_ccitt`.

Example
-------
>>> wire = frame_packet(b"\\xffhi")
>>> wire.hex(" ")
'fe ff fd 03 00 00 00 ff ff 68 69 de f5'
>>> Unframer().feed(wire)
[b'\\xffhi']
"""

from __future__ import annotations

import binascii
import enum
import struct
from collections.abc import Callable

ESCAPE_START = 0xFF
ESCAPE_NOP = 0xFE
PACKET_START = 0xFD
#: Bytes of the length field and of the CRC field, before escaping.
LENGTH_BYTES = 4
CRC_BYTES = 2


def crc16_ccitt(data: bytes, crc: int = 0xFFFF) -> int:
    """CRC-16/CCITT (poly 0x1021, MSB first) of ``data`` continuing from ``crc``.

    ``binascii.crc_hqx`` is exactly this CRC (libcrc's ``update_crc_ccitt`` byte by byte).
    """
    return binascii.crc_hqx(data, crc)


def escape(data: bytes) -> bytes:
    """``data`` with every ``0xFF`` doubled, as sent inside a packet."""
    return data.replace(b"\xff", b"\xff\xff")


def frame_packet(payload: bytes, *, after_reset: bool = True) -> bytes:
    """The wire bytes of one packet; ``after_reset`` prefixes the resynchronising ``FE``."""
    body = b"\xff\xfd" + escape(struct.pack("<I", len(payload))) + escape(payload)
    crc = crc16_ccitt(body)
    return (b"\xfe" if after_reset else b"") + body + escape(struct.pack("<H", crc))


class Framer:
    """Writes packets to a byte sink (``write(bytes)``), remembering whether it was reset."""

    def __init__(self, write: Callable[[bytes], object]):
        self._write = write
        self._after_reset = True

    def reset(self) -> None:
        """The next packet is preceded by the resynchronising ``FE`` again."""
        self._after_reset = True

    def write(self, payload: bytes) -> None:
        """Frame and send one whole packet."""
        wire = frame_packet(bytes(payload), after_reset=self._after_reset)
        self._write(wire)
        self._after_reset = False


class UnframerError(enum.IntEnum):
    """What went wrong with a packet; the values are the CRT's ``tvm_crt_error_t`` codes."""

    SHORT_PACKET = 0x201  # kTvmErrorFramingShortPacket: FF FD inside a packet
    INVALID_ESCAPE = 0x202  # kTvmErrorFramingInvalidEscape: FF then not FF/FE/FD
    PAYLOAD_OVERFLOW = 0x203  # kTvmErrorFramingPayloadOverflow: length > max_payload
    BAD_CRC = 0x2FF  # not a CRT code: PacketDone(false) in TVM


class _State(enum.Enum):
    FIND_PACKET_START = 0
    FIND_PACKET_LENGTH = 1
    FIND_PACKET_CRC = 2  # TVM's name for "reading the payload"
    FIND_CRC_END = 3


class Unframer:
    """Recovers packets from a byte stream; bytes may arrive in any split.

    ``feed(data)`` returns the payloads of the packets completed with a good CRC. Every other
    outcome is appended to :attr:`events` as ``(UnframerError, detail)`` — the receiver then
    looks for the next ``FF FD``, exactly like the C unframer (which the tests hold it to).
    ``max_payload`` bounds the length field (the device's receive buffer).
    """

    def __init__(self, max_payload: int = 1 << 31):
        self.max_payload = max_payload
        self.events: list[tuple[UnframerError, int]] = []
        self._reset()

    def _reset(self) -> None:
        self._state = _State.FIND_PACKET_START
        self._field = bytearray()  # length or CRC bytes so far (unescaped)
        self._payload = bytearray()
        self._remaining = 0
        self._crc = 0xFFFF

    def _fail(self, error: UnframerError, detail: int = 0) -> None:
        self.events.append((error, detail))
        self._reset()

    def feed(self, data: bytes) -> list[bytes]:
        """Consume ``data``; return the payloads of packets completed with a valid CRC."""
        done: list[bytes] = []
        data = bytes(data)
        i, n = 0, len(data)
        while i < n:
            if self._state is _State.FIND_PACKET_START:
                i = self._find_start(data, i)
                continue
            if self._state is _State.FIND_PACKET_CRC and not self._saw_escape:
                # Fast path: copy the run of plain payload bytes up to the next escape.
                stop = data.find(b"\xff", i, min(n, i + self._remaining))
                stop = min(n, i + self._remaining) if stop < 0 else stop
                if stop > i:
                    chunk = data[i:stop]
                    self._crc = crc16_ccitt(chunk, self._crc)
                    self._payload += chunk
                    self._remaining -= len(chunk)
                    i = stop
                    self._after_payload_byte()
                    continue
            i = self._consume_escaped(data, i, done)
        return done

    # The escape flag survives packet boundaries (a short packet leaves "FF" seen), so it is
    # kept apart from _reset.
    _saw_escape = False

    def _find_start(self, data: bytes, i: int) -> int:
        for j in range(i, len(data)):
            c = data[j]
            if c == ESCAPE_START:
                self._saw_escape = True
            elif c == PACKET_START and self._saw_escape:
                self._saw_escape = False
                self._state = _State.FIND_PACKET_LENGTH
                self._crc = crc16_ccitt(b"\xff\xfd")
                return j + 1
            else:
                self._saw_escape = False
        return len(data)

    def _consume_escaped(self, data: bytes, i: int, done: list[bytes]) -> int:
        """Consume one wire byte inside a packet; return the next index."""
        c = data[i]
        in_crc = self._state is _State.FIND_CRC_END
        if self._saw_escape:
            self._saw_escape = False
            if c == PACKET_START:
                # Leave the FD unconsumed with the escape seen: it starts the next packet.
                self._saw_escape = True
                self._fail(UnframerError.SHORT_PACKET)
                return i
            if c == ESCAPE_NOP:
                if not in_crc:
                    self._crc = crc16_ccitt(data[i:i + 1], self._crc)
                return i + 1
            if c != ESCAPE_START:
                self._fail(UnframerError.INVALID_ESCAPE, c)
                return i + 1
        elif c == ESCAPE_START:
            self._saw_escape = True
            if not in_crc:
                self._crc = crc16_ccitt(data[i:i + 1], self._crc)
            return i + 1
        if not in_crc:
            self._crc = crc16_ccitt(data[i:i + 1], self._crc)
        self._accept(c, done)
        return i + 1

    def _accept(self, c: int, done: list[bytes]) -> None:
        """One unescaped byte of the length, payload or CRC field."""
        if self._state is _State.FIND_PACKET_CRC:
            self._payload.append(c)
            self._remaining -= 1
            self._after_payload_byte()
            return
        self._field.append(c)
        if self._state is _State.FIND_PACKET_LENGTH and len(self._field) == LENGTH_BYTES:
            length = struct.unpack("<I", self._field)[0]
            self._field.clear()
            if length > self.max_payload:
                self._fail(UnframerError.PAYLOAD_OVERFLOW, length)
                return
            self._remaining = length
            self._state = _State.FIND_PACKET_CRC
            self._after_payload_byte()
        elif self._state is _State.FIND_CRC_END and len(self._field) == CRC_BYTES:
            crc_ok = struct.unpack("<H", self._field)[0] == self._crc
            payload = bytes(self._payload)
            if crc_ok:
                done.append(payload)
            else:
                self.events.append((UnframerError.BAD_CRC, len(payload)))
            self._reset()

    def _after_payload_byte(self) -> None:
        if self._state is _State.FIND_PACKET_CRC and self._remaining == 0:
            self._state = _State.FIND_CRC_END
