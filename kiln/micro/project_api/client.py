"""The Project API client (TVM's ``tvm.micro.project_api.client``): starts a project's
``microtvm_api_server.py`` and calls its methods over JSON-RPC 2.0.

Entry points: :class:`ProjectAPIClient`, :func:`instantiate_from_dir`.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO

import kiln
from kiln.micro.project_api.server import (
    PROTOCOL_VERSION,
    ServerError,
    UnsupportedTVMVersionError,
    error_from_reply,
)

SERVER_SCRIPT = "microtvm_api_server.py"


class ProjectAPIClient:
    """Calls a Project API server through ``read_file`` / ``write_file`` (its reply and
    request pipes). ``process`` is the server process, closed with the client."""

    def __init__(self, read_file: BinaryIO, write_file: BinaryIO,
                 process: subprocess.Popen | None = None):
        self._read = read_file
        self._write = write_file
        self.process = process
        self._next_id = 0

    def close(self) -> None:
        """Close the pipes; the server exits at end of input."""
        for f in (self._write, self._read):
            try:
                f.close()
            except OSError:
                pass
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def __del__(self):
        if getattr(self, "process", None) is not None:
            self.close()

    def _request_reply(self, method: str, params: dict) -> Any:
        self._next_id += 1
        request = {"jsonrpc": "2.0", "method": method, "params": params, "id": self._next_id}
        try:
            self._write.write(json.dumps(request).encode() + b"\n")
            self._write.flush()
            line = self._read.readline()
        except (BrokenPipeError, OSError) as err:
            raise ServerError(f"Project API server died during {method}: {err}") from None
        if not line:
            code = self.process.poll() if self.process is not None else None
            raise ServerError(f"Project API server closed its output during {method}"
                              + (f" (exit code {code})" if code is not None else ""))
        try:
            reply = json.loads(line)
        except ValueError:
            raise ServerError(f"Project API server sent a non-JSON reply to {method}: "
                              f"{line[:200]!r}") from None
        if reply.get("id") != self._next_id or reply.get("jsonrpc") != "2.0":
            raise ServerError(f"Project API server sent a malformed reply to {method}: "
                              f"{reply!r}")
        if "error" in reply:
            raise error_from_reply(reply["error"])
        return reply.get("result")

    def server_info_query(self, tvm_version: str = kiln.__version__) -> dict:
        reply = self._request_reply("server_info_query", {"tvm_version": tvm_version})
        if reply.get("protocol_version") != PROTOCOL_VERSION:
            raise UnsupportedTVMVersionError(
                f"the server speaks Project API protocol {reply.get('protocol_version')}, "
                f"this client {PROTOCOL_VERSION}")
        return reply

    def generate_project(self, model_library_format_path: str, standalone_crt_dir: str,
                         project_dir: str, options: dict | None = None) -> None:
        self._request_reply("generate_project", {
            "model_library_format_path": str(model_library_format_path),
            "standalone_crt_dir": str(standalone_crt_dir), "project_dir": str(project_dir),
            "options": options or {}})

    def build(self, options: dict | None = None) -> None:
        self._request_reply("build", {"options": options or {}})

    def flash(self, options: dict | None = None) -> None:
        self._request_reply("flash", {"options": options or {}})

    def open_transport(self, options: dict | None = None) -> dict:
        return self._request_reply("open_transport", {"options": options or {}})

    def close_transport(self) -> None:
        self._request_reply("close_transport", {})

    def read_transport(self, n: int, timeout_sec: float | None) -> dict:
        reply = self._request_reply("read_transport", {"n": n, "timeout_sec": timeout_sec})
        return {"data": base64.b85decode(reply["data"])}

    def write_transport(self, data: bytes, timeout_sec: float | None) -> None:
        self._request_reply("write_transport", {"data": base64.b85encode(data).decode(),
                                                "timeout_sec": timeout_sec})


def instantiate_from_dir(project_dir: str | os.PathLike, debug: bool = False
                         ) -> ProjectAPIClient:
    """Start ``project_dir/microtvm_api_server.py`` and return a client connected to it."""
    project_dir = Path(project_dir).resolve()
    script = project_dir / SERVER_SCRIPT
    if not script.is_file():
        raise ServerError(f"{project_dir} is not a microTVM project: no {SERVER_SCRIPT}")
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    args = [sys.executable, str(script), "--read-fd", str(request_read),
            "--write-fd", str(reply_write)] + (["--debug"] if debug else [])
    # The server imports kiln: let it find this very copy.
    kiln_root = str(Path(kiln.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (kiln_root, os.environ.get("PYTHONPATH", "")) if p))
    process = subprocess.Popen(args, cwd=str(project_dir), pass_fds=(request_read, reply_write),
                               env=env)
    os.close(request_read)
    os.close(reply_write)
    return ProjectAPIClient(os.fdopen(reply_read, "rb"), os.fdopen(request_write, "wb", 0),
                            process)
