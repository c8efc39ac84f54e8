"""Host-driven microTVM (TVM's ``tvm.micro.session``): a :class:`Session` speaks TVM's RPC
protocol to the device's RPC server through the session and framing layers, and the executors
here keep the graph on the host while kernels and tensors live on the device.

Entry points: :class:`Session`, :func:`create_local_graph_executor`,
:func:`create_local_aot_executor`, :class:`SessionTerminatedError`.

Example
-------
::

    with tvm.micro.Session(project.transport()) as session:
        graph_mod = tvm.micro.create_local_graph_executor(
            factory.get_graph_json(), session.get_system_lib(), session.device)
        graph_mod.set_input(**factory.get_params())
        graph_mod.run(x=data)
        out = graph_mod.get_output(0).numpy()
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kiln.micro.session_layer import SessionLayer, SessionTerminatedError
from kiln.micro.transport import IoTimeoutError, Transport, TransportTimeouts
from kiln.rpc.client import ClientEndpoint, RPCSession
from kiln.rpc.protocol import Channel, ChannelClosed, ChannelTimeout
from kiln.runtime.device import Device
from kiln.runtime.error import TVMError
from kiln.runtime.graph_executor import parse_graph_json
from kiln.runtime.ndarray import NDArray, empty

__all__ = ["Session", "SessionTerminatedError", "create_local_graph_executor",
           "create_local_aot_executor", "HostDrivenGraphExecutor", "RemoteAotModule"]


class SessionChannel(Channel):
    """An RPC :class:`~kiln.rpc.protocol.Channel` over the session layer: each send is one
    Normal message; received messages form the byte stream the RPC engine reads."""

    def __init__(self, layer: SessionLayer) -> None:
        self.layer = layer
        self.timeout = layer.timeouts.session_established_timeout_sec or None
        self._pending = bytearray()
        self.ending = False  # set by Session.__exit__: a dead device is no error then

    def send(self, *parts: bytes | bytearray | memoryview) -> None:
        if self.ending and not self.layer.established:
            raise ChannelClosed("the microTVM session has ended")
        self.layer.send(b"".join(bytes(p) for p in parts))

    def recv_into(self, view: memoryview) -> None:
        got = 0
        while got < len(view):
            if not self._pending:
                try:
                    self._pending += self.layer.receive(self.timeout)
                except IoTimeoutError as err:
                    raise ChannelTimeout(f"microTVM session: {err}", got) from None
            take = min(len(view) - got, len(self._pending))
            view[got:got + take] = self._pending[:take]
            del self._pending[:take]
            got += take

    def close(self) -> None:
        """The session outlives the channel; :class:`Session` ends both."""


class Session:
    """A host-driven session with a device: a context manager over ``transport``.

    ``timeout_override`` replaces the transport's :class:`TransportTimeouts`. Entering opens
    the transport, runs the StartSession handshake (with retries) and InitServer; a device that
    resets or dies afterwards raises :class:`SessionTerminatedError` from the next call.
    """

    def __init__(self, transport_context_manager: Transport | None = None,
                 session_name: str = "micro-rpc",
                 timeout_override: TransportTimeouts | None = None) -> None:
        if transport_context_manager is None:
            raise TVMError("tvm.micro.Session needs a transport, e.g. project.transport()")
        self.transport = transport_context_manager
        self.session_name = session_name
        self.timeout_override = timeout_override
        self._rpc: RPCSession | None = None
        self._layer: SessionLayer | None = None
        self._channel: SessionChannel | None = None
        self.device: Device | None = None

    def __enter__(self) -> Session:
        self.transport.open()
        try:
            timeouts = self.timeout_override or self.transport.timeouts()
            self._layer = SessionLayer(self.transport, timeouts)
            self._layer.start()
            self._channel = SessionChannel(self._layer)
            endpoint = ClientEndpoint(self._channel, self.session_name)
            endpoint.init_server()
            self._rpc = RPCSession(endpoint)
            self.device = self._rpc.cpu(0)
        except BaseException:
            self.transport.close()
            raise
        return self

    def __exit__(self, exc_type, exc_value, exc_traceback) -> None:
        try:
            if self._rpc is not None:
                # kShutdown if the device still listens; either way the endpoint is closed,
                # so remote objects freed later do not talk to a dead link.
                self._channel.ending = True
                self._rpc.close()
            if self._layer is not None:
                self._layer.terminate()
        except TVMError:
            pass  # the device is already gone; closing the transport is all that is left
        finally:
            self.transport.close()

    def _session(self) -> RPCSession:
        if self._rpc is None:
            raise TVMError("the micro session is not open: use it in a `with` block")
        return self._rpc

    def get_function(self, name: str):
        """A global function of the device."""
        return self._session().get_function(name)

    def get_system_lib(self):
        """The device's system library (its model kernels) as a remote module."""
        return self._session().get_function("runtime.SystemLib")()

    def create_aot_executor(self) -> RemoteAotModule:
        """The device's AOT executor for the model ``default``."""
        create = self._session().get_function("tvm.aot_executor.create")
        return RemoteAotModule(create(self.get_system_lib(), self.device, "default"))


class RemoteAotModule:
    """TVM's ``AotModule`` over an executor module living on the device."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self._get = {name: module.get_function(name) for name in
                     ("set_input", "run", "get_output", "get_input", "get_num_outputs",
                      "get_num_inputs", "get_input_index")}

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        if key is not None:
            self.get_input(key).copyfrom(_host(value))
        for name, val in params.items():
            self.get_input(name).copyfrom(_host(val))

    def run(self, **input_dict: Any) -> None:
        if input_dict:
            self.set_input(**input_dict)
        self._get["run"]()

    def get_input(self, key: int | str) -> NDArray:
        return self._get["get_input"](key)

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        value = self._get["get_output"](index)
        return out.copyfrom(value) if out is not None else value

    def get_num_outputs(self) -> int:
        return int(self._get["get_num_outputs"]())

    def get_num_inputs(self) -> int:
        return int(self._get["get_num_inputs"]())

    def get_input_index(self, name: str) -> int:
        return int(self._get["get_input_index"](name))


def _host(value: Any) -> np.ndarray:
    return value.numpy() if isinstance(value, NDArray) else np.asarray(value)


class HostDrivenGraphExecutor:
    """The graph executor with the graph on the host and kernels and tensors on the device
    (TVM's ``create_local_graph_executor`` result; ``GraphModule``'s methods)."""

    def __init__(self, graph_json: str, mod: Any, device: Device) -> None:
        self.graph = graph = parse_graph_json(graph_json)
        pool_bytes: dict[int, int] = {}
        for entry in graph.entries:
            pool_bytes[entry.storage_id] = max(pool_bytes.get(entry.storage_id, 0), entry.nbytes)
        # One device buffer per storage id, as TVM's SetupStorage (float32 words).
        pool = {sid: empty(((n + 3) // 4,), "float32", device)
                for sid, n in sorted(pool_bytes.items())}
        self._entries = [pool[e.storage_id]._create_view(e.shape, str(e.dtype))
                         for e in graph.entries]
        self._flat = [pool[e.storage_id]._create_view((int(np.prod(e.shape)),), str(e.dtype))
                      for e in graph.entries]
        self._input_index = {graph.nodes[nid].name: i for i, nid in enumerate(graph.arg_nodes)}
        self._ops = []
        kernels: dict[str, Any] = {}
        for nid, node in enumerate(graph.nodes):
            if node.op == "null" or node.func_name == "__nop":
                continue
            func = kernels.get(node.func_name)
            if func is None:
                func = kernels[node.func_name] = mod.get_function(node.func_name)
            eids = [graph.entry_id(src, i) for src, i in node.inputs]
            eids += [graph.entry_id(nid, i) for i in range(node.num_outputs)]
            arrays = self._flat if node.flatten_data else self._entries
            self._ops.append((func, [arrays[e] for e in eids]))

    def _input_eid(self, key: int | str) -> int:
        if isinstance(key, str):
            if key not in self._input_index:
                raise TVMError(f"Could not find '{key}' in graph's inputs")
            key = self._input_index[key]
        if not 0 <= key < len(self.graph.arg_nodes):
            raise TVMError(f"input index {key} out of range (the graph has "
                           f"{len(self.graph.arg_nodes)} inputs)")
        return self.graph.entry_id(self.graph.arg_nodes[key])

    def set_input(self, key: int | str | None = None, value: Any = None, **params: Any) -> None:
        """Copy ``value`` (and every ``name=value``) into the device tensors of the inputs."""
        if key is not None:
            self._entries[self._input_eid(key)].copyfrom(_host(value))
        for name, val in params.items():
            self._entries[self._input_eid(name)].copyfrom(_host(val))

    def run(self, **input_dict: Any) -> None:
        """Set ``input_dict``, then call every kernel on the device in graph order."""
        if input_dict:
            self.set_input(**input_dict)
        for func, arrays in self._ops:
            func(*arrays)

    def get_input(self, key: int | str) -> NDArray:
        return self._entries[self._input_eid(key)]

    def get_output(self, index: int, out: NDArray | None = None) -> NDArray:
        heads = self.graph.heads
        if not 0 <= index < len(heads):
            raise TVMError(f"output index {index} out of range (the graph has {len(heads)} "
                           "outputs)")
        value = self._entries[self.graph.entry_id(*heads[index])]
        return out.copyfrom(value) if out is not None else value

    def get_num_outputs(self) -> int:
        return len(self.graph.heads)

    def get_num_inputs(self) -> int:
        return len(self.graph.arg_nodes)

    def get_input_index(self, name: str) -> int:
        return self._input_index.get(name, -1)


def create_local_graph_executor(graph_json_str: str, mod: Any, device: Device
                                ) -> HostDrivenGraphExecutor:
    """A graph executor on the host whose kernels (``mod``) and tensors are on ``device``."""
    return HostDrivenGraphExecutor(graph_json_str, mod, device)


def create_local_aot_executor(session: Session) -> RemoteAotModule:
    """The device's AOT executor (TVM's helper of the same name)."""
    return session.create_aot_executor()
