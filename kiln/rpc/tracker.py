"""The RPC tracker (TVM's protocol): servers register by key, clients request a free server.

Entry points: :class:`Tracker` (the service, threads over one listening socket),
:func:`connect_tracker` / :class:`TrackerSession` (the client), :class:`TrackerCode`,
:func:`send_json`, :func:`recv_json`.

Wire format: the client sends i32 ``RPC_TRACKER_MAGIC`` and the tracker echoes it; then every
message is ``i32 length`` + UTF-8 JSON, an array ``[code, ...]``. PUT registers a free server
under a key with a match key; REQUEST ``[4, key, user, priority]`` is answered only when a
server is free (``[0, [host, port, matchkey]]``; higher priority first, FIFO among equals);
UPDATE_INFO, SUMMARY, PING, STOP and GET_PENDING_MATCHKEYS as in TVM (docs/rpc.md).
"""

from __future__ import annotations

import heapq
import itertools
import json
import socket
import struct
import threading
import time
from enum import IntEnum
from typing import Any

from kiln.rpc.protocol import RPC_TRACKER_MAGIC
from kiln.runtime.error import RPCError, TVMError

__all__ = ["TrackerCode", "Tracker", "TrackerSession", "connect_tracker", "send_json",
           "recv_json", "tracker_handshake", "bind_listener", "close_listener", "accept_loop"]

MAX_MESSAGE_BYTES = 1 << 20
_I32 = struct.Struct("<i")


class TrackerCode(IntEnum):
    FAIL = -1
    SUCCESS = 0
    PING = 1
    STOP = 2
    PUT = 3
    REQUEST = 4
    UPDATE_INFO = 5
    SUMMARY = 6
    GET_PENDING_MATCHKEYS = 7


def _recv_exact(sock: socket.socket, n: int, peer: str) -> bytes:
    data = bytearray()
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except TimeoutError:
            raise RPCError(f"tracker connection {peer}: no data for {sock.gettimeout()}s") \
                from None
        except OSError as err:
            raise RPCError(f"tracker connection {peer} failed: {err}") from None
        if not chunk:
            raise RPCError(f"tracker connection {peer} closed by the peer")
        data += chunk
    return bytes(data)


def send_json(sock: socket.socket, value: Any) -> None:
    data = json.dumps(value).encode()
    try:
        sock.sendall(_I32.pack(len(data)) + data)
    except OSError as err:
        raise RPCError(f"tracker connection failed while sending: {err}") from None


def recv_json(sock: socket.socket, peer: str = "tracker") -> Any:
    size = _I32.unpack(_recv_exact(sock, 4, peer))[0]
    if not 0 < size <= MAX_MESSAGE_BYTES:
        raise RPCError(f"tracker connection {peer}: message length {size} is out of range")
    try:
        return json.loads(_recv_exact(sock, size, peer))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RPCError(f"tracker connection {peer}: message is not JSON: {err}") from None


def tracker_handshake(host: str, port: int, timeout: float | None) -> socket.socket:
    """A socket to the tracker at ``host:port`` past the magic exchange."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.sendall(_I32.pack(RPC_TRACKER_MAGIC))
        magic = _I32.unpack(_recv_exact(sock, 4, f"{host}:{port}"))[0]
    except OSError as err:
        raise RPCError(f"cannot connect to RPC tracker {host}:{port}: {err}") from None
    if magic != RPC_TRACKER_MAGIC:
        sock.close()
        raise RPCError(f"{host}:{port} is not an RPC tracker (magic {magic:#x})")
    return sock


# ---- the service -----------------------------------------------------------------------------


class _Conn:
    """One connection to the tracker: a server (registered values) or a client."""

    def __init__(self, sock: socket.socket, addr: tuple[str, int]) -> None:
        self.sock, self.addr = sock, addr
        self.info: dict[str, Any] = {"addr": [addr[0], addr[1]]}
        self.pending_matchkeys: set[str] = set()
        self.alive = True
        self.lock = threading.Lock()

    def reply(self, value: Any) -> None:
        with self.lock:
            send_json(self.sock, value)


class _Scheduler:
    """TVM's ``PriorityScheduler`` for one key: free servers FIFO, requests by priority."""

    def __init__(self) -> None:
        self.values: list[tuple[_Conn, str, int, str]] = []
        self.requests: list[tuple[int, int, _Conn]] = []

    def schedule(self) -> None:
        while self.values and self.requests:
            _, _, requester = heapq.heappop(self.requests)
            if not requester.alive:
                continue
            conn, host, port, matchkey = self.values.pop(0)
            try:
                requester.reply([TrackerCode.SUCCESS, [host, port, matchkey]])
            except RPCError:
                self.values.insert(0, (conn, host, port, matchkey))  # requester gone
                continue
            conn.pending_matchkeys.discard(matchkey)


class Tracker:
    """TVM's RPC tracker on ``host`` (loopback by default), first free port in [port, port_end).

    Example
    -------
    >>> tracker = Tracker(port=9190, port_end=9290)
    >>> connect_tracker("127.0.0.1", tracker.port).summary()["queue_info"]
    {}
    >>> tracker.terminate()
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 9190, port_end: int = 9199,
                 silent: bool = False, read_timeout: float = 30.0) -> None:
        self.host, self.silent, self.read_timeout = host, silent, read_timeout
        self.stop_key = f"{time.time()}-{id(self)}"
        self._lock = threading.Lock()
        self._schedulers: dict[str, _Scheduler] = {}
        self._conns: set[_Conn] = set()
        self._counter = itertools.count()
        self._listener, self.port = bind_listener(host, port, port_end, "RPC tracker")
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True,
                                        name=f"kiln-rpc-tracker-{self.port}")
        self._thread.start()

    def _accept_loop(self) -> None:
        accept_loop(self._listener, self._stopped, self._serve_conn)

    def _serve_conn(self, sock: socket.socket, addr: tuple[str, int]) -> None:
        conn = _Conn(sock, addr)
        try:
            sock.settimeout(self.read_timeout)
            if _I32.unpack(_recv_exact(sock, 4, str(addr)))[0] != RPC_TRACKER_MAGIC:
                return
            sock.sendall(_I32.pack(RPC_TRACKER_MAGIC))
            with self._lock:
                self._conns.add(conn)
            while not self._stopped.is_set():
                sock.settimeout(None)  # idle clients and servers may wait for long
                header = _recv_exact(sock, 4, str(addr))
                sock.settimeout(self.read_timeout)
                message = _parse(header, sock, addr)
                if not self._handle(conn, message):
                    return
        except (RPCError, OSError, ValueError, TypeError, IndexError, KeyError):
            return  # a broken peer or a malformed message: drop this connection only
        finally:
            self._drop(conn)

    def _handle(self, conn: _Conn, message: Any) -> bool:
        if not isinstance(message, list) or not message or not isinstance(message[0], int):
            return False
        code, args = message[0], message[1:]
        with self._lock:
            if code == TrackerCode.PING:
                conn.reply(TrackerCode.SUCCESS)
            elif code == TrackerCode.STOP:
                ok = args[:1] == [self.stop_key]
                conn.reply(TrackerCode.SUCCESS if ok else TrackerCode.FAIL)
                if ok:
                    self._stopped.set()
                    close_listener(self._listener)
                    return False
            elif code == TrackerCode.PUT:
                key, (port, matchkey) = str(args[0]), args[1]
                host = args[2] if len(args) > 2 and args[2] else conn.addr[0]
                self._schedulers.setdefault(key, _Scheduler()).values.append(
                    (conn, host, int(port), str(matchkey)))
                conn.pending_matchkeys.add(str(matchkey))
                conn.reply(TrackerCode.SUCCESS)
                self._schedulers[key].schedule()
            elif code == TrackerCode.REQUEST:
                key, priority = str(args[0]), int(args[2]) if len(args) > 2 else 1
                scheduler = self._schedulers.setdefault(key, _Scheduler())
                heapq.heappush(scheduler.requests, (-priority, next(self._counter), conn))
                scheduler.schedule()
            elif code == TrackerCode.UPDATE_INFO:
                info = dict(args[0])
                addr = info.get("addr") or [None, None]
                if addr[0] is None:
                    info["addr"] = [conn.addr[0], addr[1]]
                conn.info.update(info)
                conn.reply(TrackerCode.SUCCESS)
            elif code == TrackerCode.SUMMARY:
                conn.reply([TrackerCode.SUCCESS, self._summary()])
            elif code == TrackerCode.GET_PENDING_MATCHKEYS:
                conn.reply(sorted(conn.pending_matchkeys))
            else:
                return False
        return True

    def _summary(self) -> dict[str, Any]:
        queue = {key: {"free": len(s.values), "pending": len(s.requests)}
                 for key, s in self._schedulers.items()}
        servers = [c.info for c in self._conns if str(c.info.get("key", "")).startswith("server")]
        return {"queue_info": queue, "server_info": servers}

    def _drop(self, conn: _Conn) -> None:
        conn.alive = False
        with self._lock:
            self._conns.discard(conn)
            for scheduler in self._schedulers.values():
                scheduler.values = [v for v in scheduler.values if v[0] is not conn]
                scheduler.requests = [r for r in scheduler.requests if r[2] is not conn]
                heapq.heapify(scheduler.requests)
        try:
            conn.sock.close()
        except OSError:
            pass

    def terminate(self) -> None:
        """Stop accepting and close every connection."""
        self._stopped.set()
        close_listener(self._listener)
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=5)


def _parse(header: bytes, sock: socket.socket, addr: Any) -> Any:
    size = _I32.unpack(header)[0]
    if not 0 < size <= MAX_MESSAGE_BYTES:
        raise RPCError(f"tracker message length {size} from {addr} is out of range")
    try:
        return json.loads(_recv_exact(sock, size, str(addr)))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RPCError(f"tracker message from {addr} is not JSON") from None


def accept_loop(listener: socket.socket, stopped: threading.Event,
                serve: Any) -> None:
    """Accept connections until ``stopped`` or the listener closes; ``serve(sock, addr)``
    runs on a thread of its own per connection."""
    while not stopped.is_set():
        try:
            sock, addr = listener.accept()
        except OSError:
            return
        threading.Thread(target=serve, args=(sock, addr), daemon=True).start()


def close_listener(sock: socket.socket) -> None:
    """Close a listening socket so that a thread blocked in ``accept`` wakes up (Linux needs
    the shutdown; close alone leaves it blocked)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def bind_listener(host: str, port: int, port_end: int, what: str) -> tuple[socket.socket, int]:
    """A listening socket on the first free port in [port, port_end) (port 0: any)."""
    last_error: OSError | None = None
    for candidate in range(port, max(port_end, port + 1)):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, candidate))
        except OSError as err:
            sock.close()
            last_error = err
            continue
        sock.listen(64)
        return sock, sock.getsockname()[1]
    raise TVMError(f"{what}: no free port in [{port}, {port_end}) on {host}: {last_error}")


# ---- the client ------------------------------------------------------------------------------


class TrackerSession:
    """A connection to a tracker (TVM's ``tvm.rpc.TrackerSession``)."""

    def __init__(self, addr: tuple[str, int], timeout: float | None = 60.0) -> None:
        self._addr = addr
        self._timeout = timeout
        self._sock: socket.socket | None = None
        self._connect()

    def _connect(self) -> None:
        self._sock = tracker_handshake(self._addr[0], self._addr[1], self._timeout)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _call(self, message: list, timeout: float | None = -1.0) -> Any:
        if self._sock is None:
            raise RPCError("the tracker session is closed")
        send_json(self._sock, message)
        if timeout != -1.0:
            self._sock.settimeout(timeout)
        try:
            return recv_json(self._sock, f"{self._addr[0]}:{self._addr[1]}")
        finally:
            if timeout != -1.0 and self._sock is not None:
                self._sock.settimeout(self._timeout)

    def summary(self) -> dict[str, Any]:
        """``{"queue_info": {key: {"free", "pending"}}, "server_info": [...]}``."""
        reply = self._call([TrackerCode.SUMMARY])
        if not isinstance(reply, list) or reply[:1] != [TrackerCode.SUCCESS]:
            raise RPCError(f"invalid tracker SUMMARY reply {reply!r}")
        return reply[1]

    def text_summary(self) -> str:
        """The summary as TVM's ``query_rpc_tracker`` prints it."""
        data = self.summary()
        lines = ["Server List", "------------------------------", "server-address\tkey",
                 "------------------------------"]
        for item in data["server_info"]:
            addr = item["addr"]
            lines.append(f"{addr[0]}:{addr[1]}\t{item['key']}")
        lines += ["------------------------------", "", "Queue Status"]
        queue = data["queue_info"]
        width = max([len(k) for k in queue] + [3])
        rule = "-" * (width + 24)
        lines += [rule, f"{'key':<{width}}   total  free  pending", rule]
        for key in sorted(queue):
            free, pending = queue[key]["free"], queue[key]["pending"]
            total = sum(1 for item in data["server_info"]
                        if str(item["key"]).split(":", 1)[-1] == key)
            lines.append(f"{key:<{width}}   {total:<5}  {free:<4}  {pending}")
        lines.append(rule)
        return "\n".join(lines) + "\n"

    def request(self, key: str, priority: int = 1, session_timeout: float = 0,
                max_retry: int = 5, session_constructor_args: list | None = None,
                wait_timeout: float | None = None) -> Any:
        """Wait for a free server of ``key`` and connect to it; an :class:`RPCSession`.

        ``wait_timeout`` (kiln) bounds the wait for a free server (None: forever, as TVM).
        """
        from kiln.rpc.client import connect

        last_error: Exception | None = None
        for _ in range(max_retry):
            try:
                if self._sock is None:
                    self._connect()
                reply = self._call([TrackerCode.REQUEST, key, "", priority], wait_timeout)
                if not isinstance(reply, list) or reply[:1] != [TrackerCode.SUCCESS]:
                    raise RPCError(f"invalid tracker REQUEST reply {reply!r}")
                host, port, matchkey = reply[1]
                return connect(host, port, matchkey, session_timeout,
                               session_constructor_args)
            except (RPCError, OSError) as err:
                self.close()
                last_error = err
        raise RPCError(f"Cannot request {key} after {max_retry} retry, last_error:"
                       f"{last_error}")

    def request_and_run(self, key: str, func: Any, priority: int = 1,
                        session_timeout: float = 0, max_retry: int = 2) -> Any:
        """Request a server and run ``func(session)``, retrying on failure as TVM does."""
        last_error: Exception | None = None
        for _ in range(max_retry):
            start = time.time()
            sess = self.request(key, priority, session_timeout)
            try:
                return func(sess)
            except TVMError as err:
                if session_timeout and time.time() - start >= 0.95 * session_timeout:
                    raise RPCError(f"Session timeout when running {func.__name__}") from err
                last_error = err
            finally:
                sess.close()
        raise RPCError(f"Failed to run on {key} after {max_retry} retry, last_error:"
                       f"{last_error}")


def connect_tracker(url: str, port: int) -> TrackerSession:
    """Connect to the tracker at ``url:port`` (TVM's ``tvm.rpc.connect_tracker``)."""
    return TrackerSession((url, port))
