"""The Project API: JSON-RPC 2.0 requests and errors (hand-made lines against the server, a
fake handler behind a real subprocess pipe pair), option checking, base85 transport data, and
the template lookup.
"""

from __future__ import annotations

import base64
import io
import json
import os
import threading

import pytest

import kiln as tvm
from kiln.micro.project_api import client, server
from kiln.micro.project_api.server import ProjectOption, ServerInfo
from kiln.micro.transport import TransportTimeouts

OPTIONS = [
    ProjectOption("mode", type="str", choices=["a", "b"], default="a", optional=["build"],
                  help="a mode"),
    ProjectOption("size", type="int", required=["flash"], help="a size"),
]


class FakeHandler(server.ProjectAPIHandler):
    """Records calls; its transport echoes what was written."""

    def __init__(self):
        self.calls, self.buffer = [], b""

    def server_info_query(self, tvm_version):
        return ServerInfo("fake", True, None, OPTIONS)

    def generate_project(self, model_library_format_path, standalone_crt_dir, project_dir,
                         options):
        raise server.ServerError("cannot generate here")

    def build(self, options):
        self.calls.append(("build", options))

    def flash(self, options):
        self.calls.append(("flash", options))

    def open_transport(self, options):
        return TransportTimeouts(1, 2, 3)

    def close_transport(self):
        pass

    def read_transport(self, n, timeout_sec):
        if not self.buffer:
            raise server.IoTimeoutError("nothing to read")
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def write_transport(self, data, timeout_sec):
        self.buffer += data


def _ask(handler, *lines: bytes) -> list[dict]:
    out = io.BytesIO()
    srv = server.ProjectAPIServer(io.BytesIO(b"".join(lines)), out, handler)
    srv.serve_forever()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _request(method, params, request_id=1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params,
                       "id": request_id}).encode() + b"\n"


@pytest.mark.parametrize(
    "line, code, text",
    [
        (b"{not json\n", -32700, "not JSON"),
        (b"[1, 2]\n", -32600, "JSON object"),
        (b'{"jsonrpc": "1.0", "method": "build", "id": 1}\n', -32600, '"jsonrpc": "2.0"'),
        (_request("reboot", {}), -32601, "no method 'reboot'"),
        (_request("build", {"opts": {}}), -32602, "takes parameters ['options']"),
        (_request("build", {"options": {"mode": "c"}}), -32602, "must be one of ['a', 'b']"),
        (_request("build", {"options": {"size": "7"}}), -32602, "'size' must be a int"),
        (_request("build", {"options": {"color": 1}}), -32602, "unknown option(s) ['color']"),
        (_request("flash", {"options": {}}), -32602, "'size' is required"),
        (_request("generate_project", {"model_library_format_path": "m",
                                       "standalone_crt_dir": "c", "project_dir": "p",
                                       "options": {}}), -32000, "cannot generate here"),
    ],
    ids=["parse", "not-object", "version", "method", "params", "choice", "type", "unknown",
         "required", "server-error"],
)
def test_errors_have_json_rpc_codes(line, code, text):
    (reply,) = _ask(FakeHandler(), line)
    assert reply["jsonrpc"] == "2.0" and "result" not in reply
    assert reply["error"]["code"] == code and text in reply["error"]["message"]


def test_options_get_defaults_and_server_info_lists_them():
    handler = FakeHandler()
    info, built = _ask(handler, _request("server_info_query", {"tvm_version": "x"}),
                       _request("build", {"options": {}}, 2))
    assert info["result"]["protocol_version"] == 1
    assert info["result"]["project_options"][0] == {
        "name": "mode", "choices": ["a", "b"], "default": "a", "type": "str", "required": [],
        "optional": ["build"], "help": "a mode"}
    assert built == {"jsonrpc": "2.0", "result": None, "id": 2}
    assert handler.calls == [("build", {"mode": "a"})]


def test_transport_data_is_base85_and_errors_keep_their_type():
    data = b"\x00\xff\xfdmicro"
    encoded = base64.b85encode(data).decode()  # the standard library is the oracle
    wrote, read, rest, empty = _ask(
        FakeHandler(),
        _request("write_transport", {"data": encoded, "timeout_sec": None}),
        _request("read_transport", {"n": 3, "timeout_sec": 1.0}, 2),
        _request("read_transport", {"n": 99, "timeout_sec": 1.0}, 3),
        _request("read_transport", {"n": 9, "timeout_sec": 1.0}, 4))
    assert wrote["result"] is None
    assert read["result"] == {"data": base64.b85encode(data[:3]).decode()}
    assert rest["result"] == {"data": base64.b85encode(data[3:]).decode()}
    assert empty["error"]["data"]["type"] == "IoTimeoutError"
    assert isinstance(server.error_from_reply(empty["error"]), server.IoTimeoutError)
    (bad,) = _ask(FakeHandler(), _request("write_transport", {"data": "~~~", "timeout_sec": 1}))
    assert bad["error"]["code"] == -32602 and "base85" in bad["error"]["message"]


def test_client_against_server_over_pipes():
    handler = FakeHandler()
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    srv = server.ProjectAPIServer(os.fdopen(request_read, "rb"),
                                  os.fdopen(reply_write, "wb", 0), handler)
    thread = threading.Thread(target=srv.serve_forever)
    thread.start()
    api = client.ProjectAPIClient(os.fdopen(reply_read, "rb"), os.fdopen(request_write, "wb", 0))
    try:
        assert api.server_info_query()["platform_name"] == "fake"
        payload = bytes(range(256)) * 4
        api.write_transport(payload, 1.0)
        assert api.read_transport(1000, 1.0)["data"] == payload[:1000]
        assert api.open_transport({})["timeouts"] == {
            "session_start_retry_timeout_sec": 1, "session_start_timeout_sec": 2,
            "session_established_timeout_sec": 3}
        with pytest.raises(server.ServerError, match="cannot generate here"):
            api.generate_project("m", "c", "p", {})
        with pytest.raises(server.JSONRPCError, match="'size' is required"):
            api.flash({})
    finally:
        api.close()
        thread.join(5)
    assert not thread.is_alive()


def test_template_lookup():
    crt = tvm.micro.get_microtvm_template_projects("crt")
    assert os.path.isfile(os.path.join(crt, "microtvm_api_server.py"))
    assert os.path.isdir(tvm.micro.get_microtvm_template_projects("qemu-cortex-m"))
    with pytest.raises(tvm.TVMError, match="no microTVM template project 'zephyr'.*'crt'"):
        tvm.micro.get_microtvm_template_projects("zephyr")


def test_template_server_reports_options_and_refuses_unknown_ones(tmp_path):
    template = tvm.micro.TemplateProject.from_directory(
        tvm.micro.get_microtvm_template_projects("qemu-cortex-m"))
    try:
        names = {o["name"]: o for o in template._info["project_options"]}
        assert set(names) == {"verbose", "workspace_size_bytes", "execution", "board"}
        assert names["execution"]["choices"] == ["host-driven", "standalone"]
        with pytest.raises(tvm.TVMError, match=r"unknown project option\(s\) \['boards'\]"):
            template.generate_project_from_mlf(tmp_path / "m.tar", tmp_path / "p",
                                               {"boards": "x"})
        with pytest.raises(server.ServerError, match="no Model Library Format archive"):
            template.generate_project_from_mlf(tmp_path / "m.tar", tmp_path / "p", {})
    finally:
        template._client.close()


def test_generated_project_remembers_its_options(tmp_path):
    (tmp_path / "m.tar").write_bytes(b"not read until build")
    project = tvm.micro.generate_project_from_mlf(
        tvm.micro.get_microtvm_template_projects("qemu-cortex-m"), tmp_path / "p",
        tmp_path / "m.tar", {"board": "qemu-cortex-m7", "workspace_size_bytes": 4096})
    try:
        defaults = {o["name"]: o["default"] for o in project.info["project_options"]}
        assert defaults["board"] == "qemu-cortex-m7" and defaults["workspace_size_bytes"] == 4096
        assert not project.info["is_template"]
        assert (tmp_path / "p" / "model.tar").read_bytes() == b"not read until build"
        with pytest.raises(server.ServerError, match="not a Model Library Format tar"):
            project.flash()
    finally:
        project.close()
    with pytest.raises(server.ServerError, match="exists and is not empty"):
        tvm.micro.generate_project_from_mlf(
            tvm.micro.get_microtvm_template_projects("crt"), tmp_path / "p", tmp_path / "m.tar")
