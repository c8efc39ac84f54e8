"""microTVM's session layer on the host: a handshake and message types over framed packets.

Every packet's payload starts with a header ``{u16 LE session_id, u8 message_type}``. The host
(initiator) sends ``StartSessionInit`` with its nonce in the low byte of the session id and a
``{u8 version=1}`` body; the device answers ``StartSessionReply`` with both nonces
(``initiator | responder << 8``), which is the session id of every later ``Normal`` message.
``Log`` messages (session id 0 allowed) carry device text; ``TerminateSession`` ends the session
— the device sends one when it boots, so a device that resets mid-session is noticed at once.
Nonce 0 is invalid. As in TVM v0.16 (``src/runtime/crt/microtvm_rpc_common/session.cc``,
``src/runtime/micro/micro_session.cc``); the C twin is ``microtvm_rpc_common/session.c``.

Entry points: :class:`SessionLayer`, :class:`MessageType`, :class:`SessionTerminatedError`.
"""

from __future__ import annotations

import collections
import enum
import logging
import random
import struct
import time
from collections.abc import Callable

from kiln.micro.framing import Framer, Unframer
from kiln.micro.transport import (
    IoTimeoutError,
    Transport,
    TransportClosedError,
    TransportTimeouts,
    write_all,
)
from kiln.runtime.error import TVMError

HEADER = struct.Struct("<HB")
SESSION_VERSION = 1
INVALID_NONCE = 0

_LOG = logging.getLogger(__name__)
_DEVICE_LOG = logging.getLogger("kiln.micro.device")


class MessageType(enum.IntEnum):
    """The session layer's message types (TVM's ``MessageType``)."""

    START_SESSION_INIT = 0x00
    START_SESSION_REPLY = 0x01
    TERMINATE_SESSION = 0x02
    LOG = 0x03
    NORMAL = 0x10


class SessionTerminatedError(TVMError):
    """The device ended the session: it reset, aborted, exited or its link closed."""


class SessionStartError(TVMError):
    """The device did not complete the StartSession handshake in time."""


def regenerate_nonce(nonce: int) -> int:
    """The next nonce after ``nonce``: TVM's rotate-and-increment, skipping the invalid 0."""
    nonce = ((((nonce << 5) | (nonce >> 5)) & 0xFF) + 1) & 0xFF
    return nonce + 1 if nonce == INVALID_NONCE else nonce


class SessionLayer:
    """The host end of a microTVM session over ``transport`` (opened by the caller).

    ``start()`` performs the handshake, retrying every ``session_start_retry_timeout_sec`` until
    ``session_start_timeout_sec`` (TVM issues #8728, #12721: a device still booting misses the
    first request). Then ``send(body)`` / ``receive()`` exchange ``Normal`` messages; device
    logs go to ``log_handler`` (default: the ``kiln.micro.device`` logger).
    """

    def __init__(
        self,
        transport: Transport,
        timeouts: TransportTimeouts | None = None,
        *,
        log_handler: Callable[[str], None] | None = None,
        nonce: int | None = None,
        max_payload: int = 1 << 26,
    ):
        self.transport = transport
        self.timeouts = timeouts if timeouts is not None else transport.timeouts()
        self.log_handler = log_handler or (lambda text: _DEVICE_LOG.info("%s", text.rstrip()))
        self.local_nonce = nonce if nonce is not None else random.randrange(1, 256)
        self.session_id = 0
        self.established = False
        self.start_attempts = 0
        self._framer = Framer(self._write)
        self._unframer = Unframer(max_payload)
        self._packets: collections.deque[bytes] = collections.deque()

    def _write(self, data: bytes) -> None:
        write_all(self.transport, data, self.timeouts.session_start_retry_timeout_sec or None)

    def _send(self, message_type: MessageType, body: bytes, session_id: int) -> None:
        try:
            self._framer.write(HEADER.pack(session_id, message_type) + bytes(body))
        except TransportClosedError as err:
            self.established = False
            raise SessionTerminatedError(f"device link closed while sending: {err}") from None

    def _next_packet(self, deadline: float | None) -> bytes | None:
        """The next well-formed payload, or None at ``deadline`` (monotonic seconds)."""
        while not self._packets:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                data = self.transport.read(4096, timeout)
            except IoTimeoutError:
                return None
            except TransportClosedError as err:
                self.established = False
                raise SessionTerminatedError(f"device link closed: {err}") from None
            self._packets.extend(self._unframer.feed(data))
            for error, detail in self._unframer.events:
                _LOG.debug("dropped a damaged packet: %s (%d)", error.name, detail)
            self._unframer.events.clear()
        return self._packets.popleft()

    def _next_message(self, deadline: float | None) -> tuple[int, int, bytes] | None:
        """The next ``(session_id, message_type, body)`` that is not a log, or None at
        ``deadline``; logs go to the handler, packets too short for a header are dropped."""
        while True:
            payload = self._next_packet(deadline)
            if payload is None:
                return None
            if len(payload) < HEADER.size:
                continue
            session_id, message_type = HEADER.unpack_from(payload)
            body = payload[HEADER.size:]
            if message_type != MessageType.LOG:
                return session_id, message_type, body
            self.log_handler(body.decode("utf-8", "replace"))

    def start(self) -> None:
        """Run the handshake; :class:`SessionStartError` if the device never answers."""
        total = self.timeouts.session_start_timeout_sec
        retry = self.timeouts.session_start_retry_timeout_sec
        deadline = None if not total else time.monotonic() + total
        self._framer.reset()
        while True:
            self.local_nonce = regenerate_nonce(self.local_nonce)
            self.start_attempts += 1
            self._send(MessageType.START_SESSION_INIT, bytes([SESSION_VERSION]),
                       self.local_nonce)
            attempt_end = deadline if not retry else time.monotonic() + retry
            if deadline is not None and attempt_end is not None:
                attempt_end = min(attempt_end, deadline)
            while (message := self._next_message(attempt_end)) is not None:
                session_id, message_type, body = message
                if (message_type == MessageType.START_SESSION_REPLY
                      and session_id & 0xFF == self.local_nonce
                      and session_id >> 8 != INVALID_NONCE
                      and body[:1] == bytes([SESSION_VERSION])):
                    self.session_id = session_id
                    self.established = True
                    return
            if deadline is not None and time.monotonic() >= deadline:
                raise SessionStartError(
                    f"the device did not answer StartSession within {total} s "
                    f"({self.start_attempts} attempts, one every {retry} s); is it flashed and "
                    "running the microTVM RPC server?"
                )

    def send(self, body: bytes) -> None:
        """Send one ``Normal`` message."""
        if not self.established:
            raise SessionTerminatedError("no session is established with the device")
        self._send(MessageType.NORMAL, body, self.session_id)

    def receive(self, timeout_sec: float | None = -1) -> bytes:
        """The body of the next ``Normal`` message of this session.

        ``timeout_sec`` defaults to ``session_established_timeout_sec`` (0 = wait forever);
        :class:`IoTimeoutError` when it passes, :class:`SessionTerminatedError` when the device
        ends the session.
        """
        if timeout_sec == -1:
            timeout_sec = self.timeouts.session_established_timeout_sec or None
        deadline = None if timeout_sec is None else time.monotonic() + timeout_sec
        while True:
            if not self.established:
                raise SessionTerminatedError("no session is established with the device")
            message = self._next_message(deadline)
            if message is None:
                raise IoTimeoutError(f"no reply from the device within {timeout_sec} s")
            session_id, message_type, body = message
            if message_type == MessageType.TERMINATE_SESSION:
                self.established = False
                raise SessionTerminatedError(
                    "the device ended the session (it reset or aborted); start a new Session"
                )
            elif message_type == MessageType.NORMAL and session_id == self.session_id:
                return body

    def terminate(self) -> None:
        """End the session politely; a link that is already gone is fine."""
        if not self.established:
            return
        self.established = False
        try:
            self._framer.write(HEADER.pack(0, MessageType.TERMINATE_SESSION))
        except TVMError:
            pass
