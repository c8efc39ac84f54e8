"""The RPC server: accepts TVM RPC clients over TCP and serves each in its own directory.

Entry points: :class:`Server` (TVM's ``tvm.rpc.Server`` arguments), used by
``python -m kiln.exec.rpc_server`` and ``kiln rpc server``.

Each accepted connection is checked (magic, key), then served by a
:class:`~kiln.rpc.serving.ServingSession` on its own thread, in a fresh temporary directory
that is removed when the session ends. A session that sends a garbage or truncated packet is
dropped; the others go on. Reads inside a packet time out after ``read_timeout`` seconds; a
client's ``-timeout=T`` key option ends its session after T seconds with TVM's
``RPCSessionTimeoutError`` message. With a tracker, the server registers under ``key`` and
serves one matched client at a time, re-registering a fresh match key after each session and
whenever the tracker forgot the current one (TVM's behaviour). With ``is_proxy=True`` the
server listens nowhere: it connects out to the RPC proxy at ``host:port``
(:mod:`kiln.rpc.proxy`) as ``server:key``, serves the client the proxy pairs it with, and
offers itself again after each session.

kiln serves sessions on threads rather than forked processes: a remote function runs in the
server process (``--no-fork`` is accepted and is what kiln always does).
"""

from __future__ import annotations

import logging
import random
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from kiln.rpc.protocol import (
    CODECS,
    RPC_CODE_DUPLICATE,
    RPC_CODE_MISMATCH,
    RPC_CODE_SUCCESS,
    RPC_MAGIC,
    Codec,
    RPCCode,
    SocketChannel,
    Writer,
    recv_handshake_int,
    send_handshake_int,
    write_packet,
)
from kiln.rpc.serving import ServingSession
from kiln.rpc.tracker import (
    TrackerCode,
    accept_loop,
    bind_listener,
    close_listener,
    recv_json,
    send_json,
    tracker_handshake,
)
from kiln.runtime.error import RPCError, TVMError
from kiln.runtime.packed_func import TypeCode

__all__ = ["Server"]

logger = logging.getLogger("kiln.rpc.server")
_MAX_KEY_BYTES = 4096


class Server:
    """An RPC server on ``host`` (loopback unless told otherwise), first free port in
    [port, port_end); with ``is_proxy``, a server behind the RPC proxy at ``host:port``.

    Example
    -------
    >>> from kiln import rpc
    >>> server = Server(port=9091, port_end=9199)
    >>> remote = rpc.connect("127.0.0.1", server.port)
    >>> remote.upload(b"42", "x.txt"); remote.listdir(".")
    'x.txt,'
    >>> remote.close(); server.terminate()
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9091, port_end: int = 9199,
                 is_proxy: bool = False, tracker_addr: tuple[str, int] | None = None,
                 key: str = "", load_library: str | None = None,
                 custom_addr: str | None = None, silent: bool = False,
                 no_fork: bool = True,
                 server_init_callback: Callable[[], None] | None = None,
                 reuse_addr: bool = True, timeout: float | None = None,
                 read_timeout: float = 30.0, codec: str = "v0.16") -> None:
        if codec not in CODECS:
            raise TVMError(f"unknown RPC codec {codec!r}; choose one of {sorted(CODECS)}")
        self.codec = CODECS[codec]
        if is_proxy and tracker_addr:
            raise TVMError("a server behind a proxy registers through the proxy's tracker, "
                           "not its own (is_proxy with tracker_addr)")
        if tracker_addr and not key:
            raise TVMError("a server registering with a tracker needs a key (--key)")
        if load_library:
            from kiln.runtime.module import load_module

            for path in load_library.split(":"):
                load_module(path)
        if server_init_callback is not None:
            server_init_callback()
        self.host, self.key, self.custom_addr = host, key, custom_addr
        self.read_timeout, self.timeout = read_timeout, timeout
        if silent:
            logger.setLevel(logging.ERROR)
        self._stopped = threading.Event()
        self._matchkey = key
        self._tracker: _TrackerLink | None = None
        self._listener: socket.socket | None = None
        self._proxy_sock: socket.socket | None = None
        if is_proxy:  # connect out to the proxy at host:port and serve what it pairs us with
            self.port = port
            self._thread = threading.Thread(target=self._proxy_loop, daemon=True,
                                            name=f"kiln-rpc-server-proxy-{port}")
            self._thread.start()
            return
        self._listener, self.port = bind_listener(host, port, port_end, "RPC server")
        if tracker_addr:
            self._tracker = _TrackerLink(self, tracker_addr)
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"kiln-rpc-server-{self.port}")
        self._thread.start()
        logger.info("bind to %s:%d", host, self.port)

    # ---- accepting ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        accept_loop(self._listener, self._stopped, self._serve_connection)

    def _expected_key(self) -> str:
        return f"client:{self._tracker.matchkey if self._tracker else self.key}"

    def _serve_connection(self, sock: socket.socket, addr: tuple[str, int]) -> None:
        peer = f"{addr[0]}:{addr[1]}"
        channel = SocketChannel(sock, self.read_timeout, peer)
        try:
            options = self._handshake(channel)
            if options is None:
                return
            self._serve_session(channel, options, peer)
        except RPCError as err:
            logger.warning("dropped RPC session with %s: %s", peer, err)
        finally:
            channel.close()

    def _handshake(self, channel: SocketChannel) -> dict[str, str] | None:
        """Check magic and key; the client's key options, or None when refused."""
        if recv_handshake_int(channel) != RPC_MAGIC:
            return None  # not an RPC client: drop silently, as TVM does
        keylen = recv_handshake_int(channel)
        if not 0 <= keylen <= _MAX_KEY_BYTES:
            return None
        raw = bytearray(keylen)
        channel.recv_into(memoryview(raw))
        tokens = raw.decode(errors="replace").split()
        if (tokens[0] if tokens else "") != self._expected_key():
            send_handshake_int(channel, RPC_CODE_MISMATCH)
            return None
        server_key = f"server:{self.key}".encode()
        channel.send(struct.pack("<ii", RPC_CODE_SUCCESS, len(server_key)), server_key)
        return dict(t[1:].split("=", 1) for t in tokens[1:] if t.startswith("-") and "=" in t)

    def _serve_session(self, channel: SocketChannel, options: dict[str, str],
                       peer: str) -> None:
        if self._tracker is not None:
            self._tracker.session_started()
        timeout = _session_timeout(options.get("timeout"))
        workdir = tempfile.mkdtemp(prefix="kiln-rpc-")
        watchdog = None
        if timeout:
            watchdog = threading.Timer(timeout, _expire, args=(channel, timeout, self.codec))
            watchdog.daemon = True
            watchdog.start()
        logger.info("connection from %s", peer)
        try:
            ServingSession(channel, workdir, self.timeout, self.codec).serve()
        finally:
            if watchdog is not None:
                watchdog.cancel()
            shutil.rmtree(workdir, ignore_errors=True)
            if self._tracker is not None:
                self._tracker.session_ended()
            logger.info("session with %s ended", peer)

    def _proxy_loop(self) -> None:
        """TVM's ``_connect_proxy_loop``: offer ``server:key`` to the proxy, serve the client
        it pairs us with, and offer again; connection errors retry every few seconds."""
        failures = 0
        while not self._stopped.is_set():
            try:
                sock = socket.create_connection((self.host, self.port), timeout=30.0)
            except OSError as err:
                failures += 1
                logger.warning("RPC proxy %s:%d unreachable (%s); retry %d", self.host,
                               self.port, err, failures)
                if failures > self.PROXY_RETRIES:
                    logger.error("giving up on RPC proxy %s:%d", self.host, self.port)
                    return
                self._stopped.wait(self.PROXY_RETRY_SECONDS)
                continue
            failures = 0
            self._proxy_sock = sock
            channel = SocketChannel(sock, None, f"proxy {self.host}:{self.port}")
            try:
                options = self._proxy_handshake(channel)
                if options is not None:
                    channel.set_timeout(self.read_timeout)
                    self._serve_session(channel, options, f"proxy {self.host}:{self.port}")
            except RPCError as err:
                logger.warning("RPC session through proxy %s:%d ended: %s", self.host,
                               self.port, err)
            finally:
                channel.close()
                self._proxy_sock = None

    PROXY_RETRIES = 5
    PROXY_RETRY_SECONDS = 5.0

    def _proxy_handshake(self, channel: SocketChannel) -> dict[str, str] | None:
        """Offer our key and wait (without timeout) for the proxy to pair us; the client's
        key options, or None when the proxy refused (no client came: offer again)."""
        offer = f"server:{self.key}".encode()
        channel.send(struct.pack("<ii", RPC_MAGIC, len(offer)), offer)
        answer = recv_handshake_int(channel)
        if answer == RPC_CODE_DUPLICATE:
            self._stopped.set()
            raise RPCError(f"key {self.key!r} is already waiting at the proxy")
        if answer == RPC_CODE_MISMATCH:
            logger.info("RPC proxy has no client for key %r yet", self.key)
            return None
        if answer != RPC_CODE_SUCCESS:
            raise RPCError(f"{self.host}:{self.port} is not an RPC proxy (answer {answer:#x})")
        keylen = recv_handshake_int(channel)
        if not 0 <= keylen <= _MAX_KEY_BYTES:
            raise RPCError(f"the proxy sent an invalid key length {keylen}")
        raw = bytearray(keylen)
        channel.recv_into(memoryview(raw))
        tokens = raw.decode(errors="replace").split()
        return dict(t[1:].split("=", 1) for t in tokens[1:] if t.startswith("-") and "=" in t)

    def terminate(self) -> None:
        """Stop accepting, end the tracker registration; running sessions finish."""
        self._stopped.set()
        if self._proxy_sock is not None:  # waiting at the proxy: stop waiting
            try:
                self._proxy_sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._listener is None:
            self._thread.join(timeout=5)
            return
        close_listener(self._listener)
        if self._tracker is not None:
            self._tracker.stop()
        self._thread.join(timeout=5)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.terminate()


def _session_timeout(text: str | None) -> float:
    try:
        return max(float(text), 0.0) if text else 0.0
    except ValueError:
        return 0.0


def _expire(channel: SocketChannel, timeout: float, codec: Codec) -> None:
    """End a session that outlived its timeout with TVM's message."""
    writer = Writer(codec)
    writer.packed_seq([(TypeCode.STR, f"RPCSessionTimeoutError: Your {timeout}s session has "
                                      "expired, try to increase the \"session_timeout\" "
                                      "value.")])
    try:
        write_packet(channel, RPCCode.kException, writer)
    except RPCError:
        pass
    channel.shutdown()  # the serving thread closes it


class _TrackerLink:
    """The server's registration with a tracker: PUT a match key while free, poll, re-PUT."""

    POLL_SECONDS = 2.0

    def __init__(self, server: Server, addr: tuple[str, int]) -> None:
        self.server, self.addr = server, addr
        self.matchkey = f"{server.key}:{random.random()}"
        self._busy = self._registered = False
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _call(self, message: list) -> Any:
        if self._sock is None:
            self._sock = tracker_handshake(*self.addr, timeout=self.server.read_timeout)
            send_json(self._sock, [TrackerCode.UPDATE_INFO,
                                   {"key": f"server:{self.server.key}",
                                    "addr": [self.server.custom_addr, self.server.port]}])
            if recv_json(self._sock) != TrackerCode.SUCCESS:
                raise RPCError(f"tracker {self.addr} refused UPDATE_INFO")
        send_json(self._sock, message)
        return recv_json(self._sock)

    def _put(self) -> None:
        self.matchkey = f"{self.server.key}:{random.random()}"
        reply = self._call([TrackerCode.PUT, self.server.key,
                            [self.server.port, self.matchkey], self.server.custom_addr])
        if reply != TrackerCode.SUCCESS:
            raise RPCError(f"tracker {self.addr} refused PUT: {reply!r}")

    def _loop(self) -> None:
        missing = 0
        while not self._stopped.is_set():
            try:
                with self._lock:
                    if not self._busy and not self._registered:
                        self._put()
                        self._registered, missing = True, 0
                    elif not self._busy:
                        pending = self._call([TrackerCode.GET_PENDING_MATCHKEYS])
                        missing = 0 if self.matchkey in pending else missing + 1
                        if missing * self.POLL_SECONDS > 6:  # handed out, never used
                            self._registered = False
            except (RPCError, OSError) as err:
                logger.warning("RPC tracker %s:%s unreachable (%s); retrying", *self.addr, err)
                with self._lock:
                    self._drop_socket()
                    self._registered = False
            self._wake.wait(self.POLL_SECONDS if self._registered else 0.5)
            self._wake.clear()

    def session_started(self) -> None:
        with self._lock:
            self._busy = True

    def session_ended(self) -> None:
        with self._lock:
            self._busy, self._registered = False, False  # the old match key is spent
        self._wake.set()

    def _drop_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        with self._lock:
            self._drop_socket()
        self._thread.join(timeout=5)
