"""The RPC proxy (TVM's ``tvm.rpc.proxy.Proxy``): servers that cannot be reached directly
(behind NAT, no fixed address) connect *out* to the proxy, clients connect to the proxy too,
and the proxy pairs them by key and forwards bytes both ways.

Entry points: :class:`Proxy`, used by ``python -m kiln.exec.rpc_proxy``.

Every peer opens with the RPC handshake: ``i32 RPC_MAGIC``, ``i32 keylen``, the key
(``"server:KEY"`` or ``"client:KEY [-timeout=T ...]"``); the match key is the first word after
the ``server:``/``client:`` prefix. Without a tracker, a server and a client with the same
match key are paired; the first to arrive waits ``timeout_server`` / ``timeout_client``
seconds for its peer and then gets ``RPC_CODE_MISMATCH``; a second waiter with the same key gets
``RPC_CODE_DUPLICATE``. Paired peers each receive ``RPC_CODE_SUCCESS``, the other's key length
and key, exactly what a direct connection to a server answers, so clients and servers need
nothing proxy-specific beyond ``Server(is_proxy=True)``.

With a tracker, each waiting server gets a fresh random match key that the proxy PUTs on the
tracker under the server's key (address: the proxy's port); a client the tracker matched
arrives with that match key and is paired at once, or refused with ``RPC_CODE_MISMATCH``. A
match key the tracker handed out but no client used within a few seconds is replaced.

kiln's proxy speaks TCP only: TVM's websocket/web page front end (``web_port``) is refused.
"""

from __future__ import annotations

import logging
import random
import socket
import struct
import threading
import time
from typing import Any

from kiln.rpc.protocol import (
    RPC_CODE_DUPLICATE,
    RPC_CODE_MISMATCH,
    RPC_CODE_SUCCESS,
    RPC_MAGIC,
)
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

__all__ = ["Proxy"]

logger = logging.getLogger("kiln.rpc.proxy")
_MAX_KEY_BYTES = 4096
_HANDSHAKE_TIMEOUT = 30.0  # seconds a peer may take to send its magic and key


class _Peer:
    """One handshaken connection waiting in a pool or forwarding to its partner."""

    def __init__(self, sock: socket.socket, addr: tuple[str, int], key: str) -> None:
        self.sock, self.addr, self.key = sock, addr, key
        self.is_server = key.startswith("server:")
        self.match_key = key[7:].split()[0] if key[7:].split() else ""
        self.alloc_time: float | None = None  # tracker mode: when the key went unused

    def send_int(self, value: int) -> None:
        self.sock.sendall(struct.pack("<i", value))

    def refuse(self, code: int) -> None:
        try:
            self.send_int(code)
        except OSError:
            pass
        _close(self.sock)

    def __repr__(self) -> str:
        return f"{self.key!r} from {self.addr[0]}:{self.addr[1]}"


class Proxy:
    """An RPC proxy on ``host`` (loopback unless told otherwise), first free port in
    [port, port_end); TVM's ``tvm.rpc.proxy.Proxy`` arguments, served on threads of this
    process.

    Example
    -------
    >>> from kiln import rpc
    >>> from kiln.rpc.proxy import Proxy
    >>> proxy = Proxy("127.0.0.1", port=9100, port_end=9199)
    >>> server = rpc.Server("127.0.0.1", proxy.port, is_proxy=True, key="board")
    >>> remote = rpc.connect("127.0.0.1", proxy.port, key="board")
    >>> remote.upload(b"1", "x"); remote.listdir(".")
    'x,'
    >>> remote.close(); server.terminate(); proxy.terminate()
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9091, port_end: int = 9199,
                 web_port: int = 0, timeout_client: float = 600, timeout_server: float = 600,
                 tracker_addr: tuple[str, int] | None = None, index_page: str | None = None,
                 resource_files: Any = None) -> None:
        if web_port or index_page or resource_files:
            raise TVMError("kiln's RPC proxy forwards TCP only: the websocket/web page front "
                           "end (web_port, index_page, resource_files) is not supported")
        self.host = host
        self.timeout_client, self.timeout_server = timeout_client, timeout_server
        self.timeout_alloc = 5.0  # seconds a tracker-issued match key may go unused
        self._lock = threading.Lock()
        self._servers: dict[str, _Peer] = {}
        self._clients: dict[str, _Peer] = {}
        self._listener, self.port = bind_listener(host, port, port_end, "RPC proxy")
        self._stopped = threading.Event()
        self._tracker = _TrackerLink(self, tracker_addr) if tracker_addr else None
        self._thread = threading.Thread(target=accept_loop, daemon=True,
                                        args=(self._listener, self._stopped, self._accept),
                                        name=f"kiln-rpc-proxy-{self.port}")
        self._thread.start()
        logger.info("RPCProxy: client port bind to %s:%d", host, self.port)

    # ---- handshake and matching ----------------------------------------------------------

    def _accept(self, sock: socket.socket, addr: tuple[str, int]) -> None:
        try:
            peer = self._handshake(sock, addr)
        except (OSError, RPCError) as err:
            logger.info("RPCProxy: dropped %s:%s during the handshake: %s", *addr[:2], err)
            _close(sock)
            return
        if peer is not None:
            self._ready(peer)

    def _handshake(self, sock: socket.socket, addr: tuple[str, int]) -> _Peer | None:
        sock.settimeout(_HANDSHAKE_TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        magic, keylen = struct.unpack("<ii", _recv_exact(sock, 8))
        if magic != RPC_MAGIC or not 0 < keylen <= _MAX_KEY_BYTES:
            logger.info("RPCProxy: %s:%s is not an RPC peer (magic 0x%x)", addr[0], addr[1],
                        magic & 0xFFFFFFFF)
            _close(sock)
            return None
        key = _recv_exact(sock, keylen).decode(errors="replace")
        sock.settimeout(None)  # paired sessions may idle as long as they like
        if not key.startswith(("server:", "client:")) or not key[7:].split():
            logger.info("RPCProxy: %s:%s sent an invalid key %r", addr[0], addr[1], key)
            _Peer(sock, addr, key).refuse(RPC_CODE_MISMATCH)
            return None
        return _Peer(sock, addr, key)

    def _ready(self, peer: _Peer) -> None:
        logger.info("RPCProxy: handler ready %r", peer)
        if self._tracker is not None:
            self._ready_tracker_mode(peer)
        else:
            self._ready_proxy_mode(peer)

    def _ready_proxy_mode(self, peer: _Peer) -> None:
        mine, theirs = (self._servers, self._clients) if peer.is_server else \
            (self._clients, self._servers)
        with self._lock:
            partner = theirs.pop(peer.match_key, None)
            if partner is None:
                if peer.match_key in mine:
                    duplicate = True
                else:
                    duplicate = False
                    mine[peer.match_key] = peer
        if partner is not None:
            self._pair(partner, peer)
        elif duplicate:
            logger.info("RPCProxy: duplicate connection with key %s", peer.match_key)
            peer.refuse(RPC_CODE_DUPLICATE)
        else:
            timeout = self.timeout_server if peer.is_server else self.timeout_client
            timer = threading.Timer(timeout, self._expire, args=(mine, peer))
            timer.daemon = True
            timer.start()

    def _expire(self, pool: dict[str, _Peer], peer: _Peer) -> None:
        """A waiter nobody matched within its timeout: refuse it (TVM's cleanup)."""
        with self._lock:
            if pool.get(peer.match_key) is not peer:
                return
            del pool[peer.match_key]
        logger.info("RPCProxy: timeout of %r, no match for key %s", peer, peer.match_key)
        peer.refuse(RPC_CODE_MISMATCH)

    def _ready_tracker_mode(self, peer: _Peer) -> None:
        if peer.is_server:
            with self._lock:
                key = _random_key(peer.match_key, self._servers)
                peer.match_key = key
                self._servers[key] = peer
            self._tracker.put(key)
            return
        with self._lock:
            partner = self._servers.pop(peer.match_key, None)
        if partner is None:
            peer.refuse(RPC_CODE_MISMATCH)
        else:
            self._pair(partner, peer)

    def _pair(self, first: _Peer, second: _Peer) -> None:
        """Tell each side the other's key, then forward bytes both ways until one closes."""
        try:
            for peer, other in ((first, second), (second, first)):
                raw = other.key.encode()
                peer.sock.sendall(struct.pack("<ii", RPC_CODE_SUCCESS, len(raw)) + raw)
        except OSError as err:
            logger.info("RPCProxy: pairing %r with %r failed: %s", first, second, err)
            _close(first.sock)
            _close(second.sock)
            return
        logger.info("RPCProxy: paired %r and %r", first, second)
        for src, dst in ((first, second), (second, first)):
            threading.Thread(target=_forward, args=(src.sock, dst.sock), daemon=True,
                             name=f"kiln-rpc-proxy-forward-{src.match_key}").start()

    def waiting(self) -> dict[str, list[str]]:
        """The match keys of servers and clients waiting for a partner (for monitoring)."""
        with self._lock:
            return {"server": sorted(self._servers), "client": sorted(self._clients)}

    # ---- lifetime ------------------------------------------------------------------------

    def terminate(self) -> None:
        """Stop accepting and close every waiting peer (paired sessions finish on their own)."""
        self._stopped.set()
        close_listener(self._listener)
        if self._tracker is not None:
            self._tracker.stop()
        with self._lock:
            waiting = [*self._servers.values(), *self._clients.values()]
            self._servers.clear()
            self._clients.clear()
        for peer in waiting:
            _close(peer.sock)
        self._thread.join(timeout=5)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.terminate()


class _TrackerLink:
    """The proxy's registration with a tracker: PUT each waiting server's match key, replace
    keys the tracker handed out that no client used, re-PUT everything after a reconnect."""

    PERIOD = 2.0

    def __init__(self, proxy: Proxy, addr: tuple[str, int]) -> None:
        self.proxy, self.addr = proxy, addr
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._keys: set[str] = set()  # server keys announced with UPDATE_INFO
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _connect(self) -> socket.socket:
        """The tracker connection; a new one is told every waiting server's key."""
        if self._sock is None:
            self._sock = tracker_handshake(*self.addr, timeout=30.0)
            self._keys = set()
            with self.proxy._lock:
                pending = list(self.proxy._servers)
            for key in pending:
                self._put_locked(key)
        return self._sock

    def _put_locked(self, match_key: str) -> None:
        rpc_key = match_key.rsplit(":", 1)[0]
        send_json(self._sock, [TrackerCode.PUT, rpc_key, [self.proxy.port, match_key], None])
        if recv_json(self._sock) != TrackerCode.SUCCESS:
            raise RPCError(f"tracker {self.addr} refused PUT of {rpc_key}")
        if rpc_key not in self._keys:
            self._keys.add(rpc_key)
            info = {"key": "server:proxy[" + ",".join(sorted(self._keys)) + "]",
                    "addr": [None, self.proxy.port]}
            send_json(self._sock, [TrackerCode.UPDATE_INFO, info])
            if recv_json(self._sock) != TrackerCode.SUCCESS:
                raise RPCError(f"tracker {self.addr} refused UPDATE_INFO")

    def put(self, match_key: str) -> None:
        """Announce a waiting server's match key (a reconnect announces them all)."""
        with self._lock:
            try:
                if self._sock is None:
                    self._connect()
                else:
                    self._put_locked(match_key)
            except (OSError, RPCError) as err:
                logger.warning("RPCProxy: tracker %s:%s unreachable (%s); retrying", *self.addr,
                               err)
                self._drop()

    def _refresh(self) -> None:
        """Replace match keys that left the tracker's queue without a client arriving."""
        with self._lock:
            sock = self._connect()
            send_json(sock, [TrackerCode.GET_PENDING_MATCHKEYS])
            pending = set(recv_json(sock))
            now = time.monotonic()
            stale = []
            with self.proxy._lock:
                for key, peer in list(self.proxy._servers.items()):
                    if key in pending:
                        peer.alloc_time = None
                    elif peer.alloc_time is None:
                        peer.alloc_time = now
                    elif now - peer.alloc_time > self.proxy.timeout_alloc:
                        del self.proxy._servers[key]
                        peer.match_key = _random_key(key.rsplit(":", 1)[0], self.proxy._servers)
                        peer.alloc_time = None
                        self.proxy._servers[peer.match_key] = peer
                        stale.append(peer.match_key)
            for key in stale:
                self._put_locked(key)

    def _loop(self) -> None:
        while not self._stopped.wait(self.PERIOD):
            try:
                self._refresh()
            except (OSError, RPCError) as err:
                logger.warning("RPCProxy: lost the tracker %s:%s (%s); retrying", *self.addr,
                               err)
                with self._lock:
                    self._drop()

    def _drop(self) -> None:
        if self._sock is not None:
            _close(self._sock)
            self._sock = None

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            self._drop()
        self._thread.join(timeout=5)


def _random_key(prefix: str, taken: dict[str, Any]) -> str:
    while True:
        key = f"{prefix}:{random.random()}"
        if key not in taken:
            return key


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise RPCError(f"connection closed after {len(data)} of {n} handshake bytes")
        data += chunk
    return bytes(data)


def _forward(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until either side closes; then close both."""
    buf = bytearray(1 << 16)
    view = memoryview(buf)
    try:
        while True:
            n = src.recv_into(buf)
            if n == 0:
                break
            dst.sendall(view[:n])
    except OSError:
        pass
    _close(src)
    _close(dst)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
