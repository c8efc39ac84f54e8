"""kiln.rpc: TVM's RPC over TCP — client sessions, server, tracker (TVM's ``tvm.rpc``).

Entry points: :func:`connect`, :func:`connect_tracker`, :class:`RPCSession`,
:class:`LocalSession`, :class:`Server`, :class:`Tracker`, :class:`TrackerSession`.
The wire protocol (v0.16, ``"0.8.0"``) is described in ``docs/rpc.md``.

Example
-------
>>> import numpy as np, kiln
>>> from kiln import rpc
>>> server = rpc.Server(port=9091, port_end=9199)
>>> remote = rpc.connect("127.0.0.1", server.port)
>>> x = kiln.nd.array(np.arange(4, dtype="float32"), remote.cpu(0))
>>> x.device == remote.cpu(0), x.numpy()
(True, array([0., 1., 2., 3.], dtype=float32))
>>> remote.close(); server.terminate()
"""

from __future__ import annotations

from kiln.rpc.client import LocalSession, RPCSession, connect
from kiln.rpc.server import Server
from kiln.rpc.tracker import Tracker, TrackerSession, connect_tracker

__all__ = ["connect", "connect_tracker", "RPCSession", "LocalSession", "Server", "Tracker",
           "TrackerSession"]
