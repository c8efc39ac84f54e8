"""The Project API handler behind kiln's template projects (``crt`` and ``qemu-cortex-m``).

Both build with :class:`kiln.micro.board.StandaloneProject` (the ``host`` board with the
system compiler, or a QEMU Cortex-M board with arm-none-eabi-gcc); the program is microTVM's
RPC server (``execution="host-driven"``, the default) or a standalone model run. ``crt``:
flash is a no-op and the transport is the program's stdin/stdout. ``qemu-cortex-m``: flash
starts QEMU and the transport is its serial port (``-serial stdio``); closing the transport or
the server stops QEMU.

Entry point: :class:`BoardProjectHandler` (a template's ``microtvm_api_server.py`` is two
lines around it).
"""

from __future__ import annotations

import atexit
import json
import shutil
from pathlib import Path

from kiln.micro import transport as micro_transport
from kiln.micro.project_api import server
from kiln.micro.project_api.server import ProjectOption, ServerInfo
from kiln.micro.transport import SubprocessTransport, TransportTimeouts

MODEL_FILE = "model.tar"
BUILD_DIR = "build"

_COMMON_OPTIONS = [
    ProjectOption("verbose", type="bool", default=False, optional=["generate_project", "build"],
                  help="Print the compiler commands."),
    ProjectOption("workspace_size_bytes", type="int", optional=["generate_project", "build"],
                  help="Bytes of the platform memory pool (default: the board's estimate)."),
    ProjectOption("execution", type="str", choices=["host-driven", "standalone"],
                  default="host-driven",
                  optional=["generate_project", "build", "flash", "open_transport"],
                  help="host-driven: the RPC server for tvm.micro.Session; standalone: the "
                       "model runs once by itself."),
]
_QEMU_BOARDS = ["qemu-cortex-m4", "qemu-cortex-m7", "qemu-cortex-m3"]


class BoardProjectHandler(server.ProjectAPIHandler):
    """Serves one template (``platform`` "crt" or "qemu-cortex-m") or a project made from it,
    living in ``project_dir``."""

    def __init__(self, platform: str, project_dir: str | Path):
        self.platform = platform
        self.project_dir = Path(project_dir).resolve()
        self._transport: SubprocessTransport | None = None
        atexit.register(self.close_transport)
        self.options = list(_COMMON_OPTIONS)
        if platform == "qemu-cortex-m":
            from kiln.micro.board.qemu import QEMU_BOARDS

            boards = [b for b in _QEMU_BOARDS if b in QEMU_BOARDS] or list(QEMU_BOARDS)
            self.options.append(ProjectOption(
                "board", type="str", choices=boards, default=boards[0],
                optional=["generate_project", "build", "flash", "open_transport"],
                help="The emulated Cortex-M board."))

    @property
    def _is_template(self) -> bool:
        return not (self.project_dir / MODEL_FILE).is_file()

    def server_info_query(self, tvm_version: str) -> ServerInfo:
        mlf = None if self._is_template else str(self.project_dir / MODEL_FILE)
        options = self.options
        if not self._is_template:  # the options it was generated with become the defaults
            chosen = json.loads((self.project_dir / "project.json").read_text())["options"]
            options = [o.replace({"default": chosen[o.name]}) if chosen.get(o.name) is not None
                       else o for o in options]
        return ServerInfo(platform_name="host" if self.platform == "crt" else self.platform,
                          is_template=self._is_template, model_library_format_path=mlf,
                          project_options=options)

    def generate_project(self, model_library_format_path, standalone_crt_dir, project_dir,
                         options):
        if not self._is_template:
            raise server.ServerError("generate_project is called on a template project, "
                                     f"not on the generated project {self.project_dir}")
        mlf = Path(model_library_format_path)
        if not mlf.is_file():
            raise server.ServerError(f"no Model Library Format archive at {mlf}")
        out = Path(project_dir)
        if out.exists() and any(out.iterdir()):
            raise server.ServerError(f"project directory {out} exists and is not empty")
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(self.project_dir / "microtvm_api_server.py", out)
        shutil.copy2(mlf, out / MODEL_FILE)
        (out / "project.json").write_text(json.dumps(
            {"platform": self.platform, "options": options}, indent=2))

    def _project(self, options: dict):
        from kiln.micro.board import StandaloneProject

        if self._is_template:
            raise server.ServerError("this is a template project: generate a project first")
        board = options.get("board", "host") if self.platform != "crt" else "host"
        return StandaloneProject(self.project_dir / MODEL_FILE, board,
                                 build_dir=self.project_dir / BUILD_DIR,
                                 workspace_bytes=options.get("workspace_size_bytes"),
                                 execution=options["execution"])

    def build(self, options):
        self._project(options).build()

    def _command(self, options: dict) -> list[str]:
        project = self._project(options)
        program = project.build_dir / ("program" if self.platform == "crt" else "program.elf")
        if not program.is_file():
            raise server.ServerError(f"{program} does not exist: call build() first")
        if options["execution"] != "host-driven":
            raise server.ServerError("a standalone project has no RPC transport; run it with "
                                     "`kiln micro run` (execution='host-driven' for Sessions)")
        if self.platform == "crt":
            return [str(program)]
        return project.board.qemu_command(program)

    def flash(self, options):
        command = self._command(options)
        if self.platform == "qemu-cortex-m":
            self._start(command)  # "flashing" an emulator is booting it

    def _start(self, command: list[str]) -> None:
        self.close_transport()
        # No session timeout on host processes; QEMU boots in well under a second.
        timeouts = TransportTimeouts(1.0, 20.0, 0)
        self._transport = SubprocessTransport(command, timeouts,
                                              cwd=str(self.project_dir / BUILD_DIR))
        self._transport.open()

    def open_transport(self, options):
        command = self._command(options)
        if self._transport is None:
            self._start(command)
        return self._transport.timeouts()

    def close_transport(self):
        if self._transport is not None:
            self._transport, transport = None, self._transport
            transport.close()

    def _require(self) -> SubprocessTransport:
        if self._transport is None:
            raise server.TransportClosedError("the transport is not open")
        return self._transport

    def read_transport(self, n, timeout_sec):
        try:
            return self._require().read(n, timeout_sec)
        except micro_transport.IoTimeoutError as err:
            raise server.IoTimeoutError(str(err)) from None
        except micro_transport.TransportClosedError as err:
            raise server.TransportClosedError(str(err)) from None

    def write_transport(self, data, timeout_sec):
        try:
            micro_transport.write_all(self._require(), data, timeout_sec)
        except micro_transport.IoTimeoutError as err:
            raise server.IoTimeoutError(str(err)) from None
        except micro_transport.TransportClosedError as err:
            raise server.TransportClosedError(str(err)) from None
