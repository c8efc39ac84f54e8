"""Generate, build and flash microTVM projects from templates (TVM's ``tvm.micro.project``).

Entry points: :func:`generate_project`, :func:`generate_project_from_mlf`,
:class:`TemplateProject`, :class:`GeneratedProject`, :func:`get_microtvm_template_projects`.

Example (TVM's tutorial flow)::

    project = tvm.micro.generate_project(
        tvm.micro.get_microtvm_template_projects("crt"), module, "/tmp/proj", {})
    project.build()
    project.flash()
    with tvm.micro.Session(project.transport()) as session:
        executor = tvm.micro.create_local_graph_executor(
            module.get_graph_json(), session.get_system_lib(), session.device)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from kiln.micro.crt_build import get_standalone_crt_dir
from kiln.micro.project_api import client
from kiln.micro.project_api.server import ProjectOption, ServerError
from kiln.micro.transport import Transport, TransportTimeouts
from kiln.runtime.error import TVMError

_TEMPLATES = Path(__file__).resolve().parent / "template_projects"


def get_microtvm_template_projects(platform: str) -> str:
    """The directory of the template project for ``platform`` ("crt" or "qemu-cortex-m")."""
    names = sorted(p.name for p in _TEMPLATES.iterdir() if (p / client.SERVER_SCRIPT).is_file())
    if platform not in names:
        raise TVMError(f"no microTVM template project {platform!r}; available: {names}")
    return str(_TEMPLATES / platform)


class ProjectTransport(Transport):
    """A :class:`~kiln.micro.transport.Transport` through the Project API's transport calls."""

    def __init__(self, api_client: client.ProjectAPIClient, options: dict):
        self._client = api_client
        self._options = options
        self._timeouts: TransportTimeouts | None = None

    def timeouts(self) -> TransportTimeouts:
        assert self._timeouts is not None, "open the transport first"
        return self._timeouts

    def open(self) -> None:
        reply = self._client.open_transport(self._options)
        self._timeouts = TransportTimeouts(**reply["timeouts"])

    def close(self) -> None:
        self._client.close_transport()

    def read(self, n: int, timeout_sec: float | None) -> bytes:
        return self._client.read_transport(n, timeout_sec)["data"]

    def write(self, data: bytes, timeout_sec: float | None) -> int:
        self._client.write_transport(data, timeout_sec)
        return len(data)


def _check_options(info: dict, options: dict | None) -> dict:
    """Catch unknown option names on the host already, with the choices at hand."""
    declared = [ProjectOption.from_json(o) for o in info["project_options"]]
    unknown = sorted(set(options or {}) - {o.name for o in declared})
    if unknown:
        raise TVMError(f"unknown project option(s) {unknown} for platform "
                       f"{info['platform_name']!r}; it accepts "
                       f"{sorted(o.name for o in declared)}")
    return dict(options or {})


class GeneratedProject:
    """A project generated from a template: ``build()``, ``flash()``, ``transport()``."""

    def __init__(self, api_client: client.ProjectAPIClient, options: dict | None = None):
        self._client = api_client
        self._info = api_client.server_info_query()
        if self._info["is_template"]:
            raise TVMError("this is a template project; generate a project from it first")
        self._options = _check_options(self._info, options)

    @classmethod
    def from_directory(cls, project_dir: str | os.PathLike, options: dict | None = None
                       ) -> GeneratedProject:
        return cls(client.instantiate_from_dir(project_dir), options)

    @property
    def info(self) -> dict:
        return self._info

    @property
    def options(self) -> dict:
        return self._options

    @options.setter
    def options(self, options: dict) -> None:
        self._options = _check_options(self._info, options)

    def build(self) -> None:
        self._client.build(self._options)

    def flash(self) -> None:
        self._client.flash(self._options)

    def transport(self) -> ProjectTransport:
        return ProjectTransport(self._client, self._options)

    def close(self) -> None:
        """Stop the project's API server (and anything it runs, such as QEMU)."""
        self._client.close()


class TemplateProject:
    """A template project directory, driven through its API server."""

    @classmethod
    def from_directory(cls, template_project_dir: str | os.PathLike) -> TemplateProject:
        return cls(client.instantiate_from_dir(template_project_dir))

    def __init__(self, api_client: client.ProjectAPIClient):
        self._client = api_client
        self._info = api_client.server_info_query()
        if not self._info["is_template"]:
            raise TVMError("not a template project")

    def generate_project_from_mlf(self, model_library_format_path, project_dir,
                                  options: dict | None = None) -> GeneratedProject:
        options = _check_options(self._info, options)
        # The server runs in the template's directory: hand it absolute paths.
        project_dir = Path(project_dir).resolve()
        self._client.generate_project(str(Path(model_library_format_path).resolve()),
                                      get_standalone_crt_dir(), str(project_dir), options)
        self._client.close()
        return GeneratedProject.from_directory(project_dir, options)

    def generate_project(self, graph_executor_factory, project_dir,
                         options: dict | None = None) -> GeneratedProject:
        """Export ``graph_executor_factory`` (relay.build's result) as MLF, then generate."""
        from kiln.micro.model_library_format import export_model_library_format

        with tempfile.TemporaryDirectory(prefix="kiln-mlf-") as tmp:
            mlf = Path(tmp) / "model.tar"
            export_model_library_format(graph_executor_factory, mlf)
            return self.generate_project_from_mlf(mlf, project_dir, options)


def generate_project(template_project_dir: str | os.PathLike, module: Any,
                     generated_project_dir: str | os.PathLike,
                     options: dict | None = None) -> GeneratedProject:
    """Generate a project for ``module`` (relay.build's result) from a template."""
    template = TemplateProject.from_directory(template_project_dir)
    try:
        return template.generate_project(module, generated_project_dir, options)
    except (ServerError, TVMError):
        template._client.close()
        raise


def generate_project_from_mlf(template_project_dir: str | os.PathLike,
                              project_dir: str | os.PathLike,
                              mlf_path: str | os.PathLike,
                              options: dict | None = None) -> GeneratedProject:
    """Generate a project from a Model Library Format archive."""
    template = TemplateProject.from_directory(template_project_dir)
    try:
        return template.generate_project_from_mlf(mlf_path, project_dir, options)
    except (ServerError, TVMError):
        template._client.close()
        raise
