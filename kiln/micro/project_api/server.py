"""The Project API server side (TVM's ``tvm.micro.project_api.server``): JSON-RPC 2.0 over a
pair of file descriptors, one request or reply per line.

A template project's ``microtvm_api_server.py`` subclasses :class:`ProjectAPIHandler` and
calls :func:`main`; the host starts it as ``microtvm_api_server.py --read-fd N --write-fd M``
(:mod:`kiln.micro.project_api.client`). Transport bytes travel base85-encoded.

Entry points: :class:`ProjectAPIHandler`, :class:`ProjectAPIServer`, :class:`ProjectOption`,
:class:`ServerInfo`, :func:`main`, the errors (:class:`ServerError` and subclasses).
"""

from __future__ import annotations

import abc
import argparse
import base64
import collections
import enum
import json
import logging
import os
import sys
import traceback
from typing import Any, BinaryIO

from kiln.micro.transport import TransportTimeouts
from kiln.runtime.error import TVMError

_LOG = logging.getLogger(__name__)

#: Version of this protocol (TVM's ``_protocol_version``); client and server must agree.
PROTOCOL_VERSION = 1


class ErrorCode(enum.IntEnum):
    """JSON-RPC 2.0 error codes, plus TVM's ``SERVER_ERROR`` for errors a handler raises."""

    SERVER_ERROR = -32000
    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603


class ServerError(TVMError):
    """An error raised by the Project API server (TVM: also the base of the client's view)."""

    code = ErrorCode.SERVER_ERROR

    def __init__(self, message: str, data: dict | None = None):
        super().__init__(message)
        self.data = data or {}


class JSONRPCError(ServerError):
    """A JSON-RPC protocol error (bad request, unknown method, bad parameters)."""

    def __init__(self, code: int, message: str, data: dict | None = None):
        super().__init__(message, data)
        self.code = code


class TransportClosedError(ServerError):
    """The transport can no longer move bytes (mirrors kiln.micro.transport's)."""


class IoTimeoutError(ServerError):
    """No data could be read, or not all written, before the timeout."""


class UnsupportedTVMVersionError(ServerError):
    """The server cannot work with the client's TVM (kiln) version."""


_ERROR_CLASSES = {cls.__name__: cls for cls in
                  (ServerError, TransportClosedError, IoTimeoutError, UnsupportedTVMVersionError)}

_OPTION_TYPES = {"bool": bool, "int": int, "str": str}


class ProjectOption(collections.namedtuple(
        "ProjectOption",
        ["name", "choices", "default", "type", "required", "optional", "help"])):
    """One option a template accepts: its ``type`` ("bool", "int", "str"), ``choices``, a
    ``default``, and the methods (``required`` / ``optional``) that use it."""

    def __new__(cls, name: str, *, type: str, help: str, choices=None, default=None,
                required=None, optional=None):
        if type not in _OPTION_TYPES:
            raise ValueError(f"option {name!r}: type must be one of {list(_OPTION_TYPES)}, "
                             f"got {type!r}")
        if not required and not optional:
            raise ValueError(f"option {name!r}: name the methods that use it (required or "
                             "optional)")
        return super().__new__(cls, name, choices, default, type, required or [],
                               optional or [], help)

    @classmethod
    def from_json(cls, data: dict) -> ProjectOption:
        return cls(data["name"], type=data["type"], help=data["help"],
                   choices=data.get("choices"), default=data.get("default"),
                   required=data.get("required"), optional=data.get("optional"))

    def replace(self, attrs: dict) -> ProjectOption:
        """A copy with ``attrs`` changed (TVM's helper for platform-specific tweaks)."""
        return self._replace(**attrs)


ServerInfo = collections.namedtuple(
    "ServerInfo",
    ["platform_name", "is_template", "model_library_format_path", "project_options"])


class ProjectAPIHandler(abc.ABC):
    """What a template project implements (TVM's abstract methods, same signatures)."""

    @abc.abstractmethod
    def server_info_query(self, tvm_version: str) -> ServerInfo:
        ...

    @abc.abstractmethod
    def generate_project(self, model_library_format_path, standalone_crt_dir, project_dir,
                         options: dict) -> None:
        ...

    @abc.abstractmethod
    def build(self, options: dict) -> None:
        ...

    @abc.abstractmethod
    def flash(self, options: dict) -> None:
        ...

    @abc.abstractmethod
    def open_transport(self, options: dict) -> TransportTimeouts:
        ...

    @abc.abstractmethod
    def close_transport(self) -> None:
        ...

    @abc.abstractmethod
    def read_transport(self, n: int, timeout_sec: float | None) -> bytes:
        ...

    @abc.abstractmethod
    def write_transport(self, data: bytes, timeout_sec: float | None) -> None:
        ...


#: Method -> its parameter names (all required).
_METHODS = {
    "server_info_query": ("tvm_version",),
    "generate_project": ("model_library_format_path", "standalone_crt_dir", "project_dir",
                         "options"),
    "build": ("options",),
    "flash": ("options",),
    "open_transport": ("options",),
    "close_transport": (),
    "read_transport": ("n", "timeout_sec"),
    "write_transport": ("data", "timeout_sec"),
}


def check_options(method: str, options: Any, declared: list[ProjectOption]) -> dict:
    """``options`` validated for ``method`` against ``declared``, with defaults filled in.

    Raises :class:`JSONRPCError` (INVALID_PARAMS) naming an unknown option, a missing
    required one, a value of the wrong type or outside the choices.
    """
    if not isinstance(options, dict):
        raise JSONRPCError(ErrorCode.INVALID_PARAMS, f"{method}: options must be an object")
    by_name = {opt.name: opt for opt in declared}
    unknown = sorted(set(options) - set(by_name))
    if unknown:
        raise JSONRPCError(ErrorCode.INVALID_PARAMS,
                           f"{method}: unknown option(s) {unknown}; this project accepts "
                           f"{sorted(by_name)}")
    result = {}
    for opt in declared:
        if opt.name in options and options[opt.name] is not None:
            value = options[opt.name]
            expected = _OPTION_TYPES[opt.type]
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise JSONRPCError(ErrorCode.INVALID_PARAMS,
                                   f"{method}: option {opt.name!r} must be a {opt.type}, got "
                                   f"{value!r}")
            if opt.choices is not None and value not in opt.choices:
                raise JSONRPCError(ErrorCode.INVALID_PARAMS,
                                   f"{method}: option {opt.name!r} must be one of "
                                   f"{opt.choices}, got {value!r}")
            result[opt.name] = value
        elif method in opt.required and opt.default is None:
            raise JSONRPCError(ErrorCode.INVALID_PARAMS,
                               f"{method}: option {opt.name!r} is required ({opt.help})")
        elif opt.default is not None:
            result[opt.name] = opt.default
    return result


class ProjectAPIServer:
    """Answers JSON-RPC requests read from ``read_file`` with ``handler``'s methods."""

    def __init__(self, read_file: BinaryIO, write_file: BinaryIO, handler: ProjectAPIHandler):
        self._read = read_file
        self._write = write_file
        self._handler = handler
        self._options: list[ProjectOption] | None = None

    def serve_forever(self) -> None:
        """Serve until the client closes its end."""
        while self.serve_one_request():
            pass

    def serve_one_request(self) -> bool:
        """Answer one request; False at end of input."""
        line = self._read.readline()
        if not line:
            return False
        request_id = None
        try:
            try:
                request = json.loads(line)
            except ValueError as err:
                raise JSONRPCError(ErrorCode.PARSE_ERROR, f"request is not JSON: {err}") from None
            if not isinstance(request, dict):
                raise JSONRPCError(ErrorCode.INVALID_REQUEST, "request must be a JSON object")
            request_id = request.get("id")
            result = self._dispatch(request)
            reply = {"jsonrpc": "2.0", "result": result, "id": request_id}
        except ServerError as err:
            reply = self._error_reply(request_id, err.code, str(err),
                                      {**err.data, "type": type(err).__name__})
        except Exception as err:  # a handler bug: report it, keep serving
            reply = self._error_reply(request_id, ErrorCode.SERVER_ERROR,
                                      f"{type(err).__name__}: {err}",
                                      {"type": "ServerError",
                                       "traceback": traceback.format_exc()})
        self._write.write(json.dumps(reply).encode() + b"\n")
        self._write.flush()
        return True

    @staticmethod
    def _error_reply(request_id, code: int, message: str, data: dict) -> dict:
        return {"jsonrpc": "2.0", "error": {"code": int(code), "message": message,
                                            "data": data}, "id": request_id}

    def _declared_options(self) -> list[ProjectOption]:
        if self._options is None:
            info = self._handler.server_info_query("kiln")
            self._options = list(info.project_options)
        return self._options

    def _dispatch(self, request: dict) -> Any:
        if request.get("jsonrpc") != "2.0" or not isinstance(request.get("method"), str):
            raise JSONRPCError(ErrorCode.INVALID_REQUEST,
                               'request needs "jsonrpc": "2.0" and a "method" string')
        method = request["method"]
        if method not in _METHODS:
            raise JSONRPCError(ErrorCode.METHOD_NOT_FOUND,
                               f"no method {method!r}; methods: {sorted(_METHODS)}")
        params = request.get("params", {})
        if not isinstance(params, dict) or set(params) != set(_METHODS[method]):
            raise JSONRPCError(ErrorCode.INVALID_PARAMS,
                               f"{method} takes parameters {list(_METHODS[method])}, got "
                               f"{sorted(params) if isinstance(params, dict) else params!r}")
        if "options" in params:
            params = {**params, "options": check_options(method, params["options"],
                                                         self._declared_options())}
        return getattr(self, f"_{method}")(**params)

    def _server_info_query(self, tvm_version: str) -> dict:
        info = self._handler.server_info_query(tvm_version)
        self._options = list(info.project_options)
        return {"protocol_version": PROTOCOL_VERSION, "platform_name": info.platform_name,
                "is_template": info.is_template,
                "model_library_format_path": info.model_library_format_path,
                "project_options": [opt._asdict() for opt in info.project_options]}

    def _generate_project(self, model_library_format_path, standalone_crt_dir, project_dir,
                          options):
        self._handler.generate_project(model_library_format_path, standalone_crt_dir,
                                       project_dir, options)

    def _build(self, options):
        self._handler.build(options)

    def _flash(self, options):
        self._handler.flash(options)

    def _open_transport(self, options):
        timeouts = self._handler.open_transport(options)
        return {"timeouts": dict(timeouts._asdict())}

    def _close_transport(self):
        self._handler.close_transport()

    def _read_transport(self, n, timeout_sec):
        data = self._handler.read_transport(int(n), timeout_sec)
        return {"data": base64.b85encode(data).decode()}

    def _write_transport(self, data, timeout_sec):
        try:
            raw = base64.b85decode(data)
        except (ValueError, TypeError) as err:
            raise JSONRPCError(ErrorCode.INVALID_PARAMS, f"write_transport: data is not "
                               f"base85: {err}") from None
        self._handler.write_transport(raw, timeout_sec)


def main(handler: ProjectAPIHandler, argv: list[str] | None = None) -> int:
    """The ``microtvm_api_server.py`` entry point: serve ``handler`` over the given fds."""
    parser = argparse.ArgumentParser(description="microTVM Project API server")
    parser.add_argument("--read-fd", type=int, required=True, help="fd to read requests from")
    parser.add_argument("--write-fd", type=int, required=True, help="fd to write replies to")
    parser.add_argument("--debug", action="store_true", help="log at DEBUG level")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, stream=sys.stderr)
    with os.fdopen(args.read_fd, "rb") as read_file, \
            os.fdopen(args.write_fd, "wb", 0) as write_file:
        ProjectAPIServer(read_file, write_file, handler).serve_forever()
    return 0


def error_from_reply(error: dict) -> ServerError:
    """The exception a client raises for a JSON-RPC error object."""
    data = error.get("data") or {}
    cls = _ERROR_CLASSES.get(data.get("type", ""), None)
    message = error.get("message", "(no message)")
    if cls is None:
        return JSONRPCError(error.get("code", ErrorCode.INTERNAL_ERROR), message, data)
    return cls(message, data)
