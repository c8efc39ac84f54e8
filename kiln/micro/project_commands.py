"""``kiln micro project ...``: generate, build, flash and run template projects from the shell.

Each command starts the project's API server and stops it (and any QEMU it started) before
returning, so nothing outlives the command. ``run`` flashes, opens a :class:`Session` and runs
the model host-driven (the graph on the host for graph-executor archives, the device's AOT
executor otherwise).

Entry points: :func:`parse_options`, :func:`generate`, :func:`run_project`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from kiln.micro import project as micro_project
from kiln.micro.board.library import ModelLibrary
from kiln.runtime.error import TVMError
from kiln.runtime.params import load_param_dict


def parse_options(pairs: Sequence[str], declared: Sequence[dict]) -> dict:
    """``["key=value", ...]`` typed by the project's declared options (bool, int, str)."""
    types = {o["name"]: o["type"] for o in declared}
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise TVMError(f"project option {pair!r} must be written key=value")
        if key not in types:
            raise TVMError(f"unknown project option {key!r}; options: {sorted(types)}")
        if types[key] == "bool":
            if value.lower() not in ("true", "false", "1", "0"):
                raise TVMError(f"option {key!r} is a bool: use true or false, not {value!r}")
            options[key] = value.lower() in ("true", "1")
        elif types[key] == "int":
            try:
                options[key] = int(value, 0)
            except ValueError:
                raise TVMError(f"option {key!r} is an int, not {value!r}") from None
        else:
            options[key] = value
    return options


def template_options(template: str) -> list[dict]:
    """The options the template ``template`` declares."""
    with contextlib.closing(micro_project.TemplateProject.from_directory(
            micro_project.get_microtvm_template_projects(template))._client) as api:
        return api.server_info_query()["project_options"]


def generate(template: str, mlf: str | os.PathLike, project_dir: str | os.PathLike,
             options: Mapping) -> None:
    """Generate ``project_dir`` from the template and a Model Library Format archive."""
    micro_project.generate_project_from_mlf(
        micro_project.get_microtvm_template_projects(template), project_dir, mlf,
        dict(options)).close()


@contextlib.contextmanager
def opened(project_dir: str | os.PathLike, options: Mapping) -> Iterator:
    """A generated project whose API server is stopped on exit."""
    project = micro_project.GeneratedProject.from_directory(project_dir, dict(options))
    try:
        yield project
    finally:
        project.close()


def run_project(project_dir: str | os.PathLike, inputs: Mapping[str, np.ndarray],
                options: Mapping) -> list[np.ndarray]:
    """Run the built project's model once; its outputs. Host-driven projects are flashed and
    driven through a Session; standalone ones run their program (``StandaloneProject.run``)."""
    with opened(project_dir, options) as project:
        chosen = {o["name"]: o["default"] for o in project.info["project_options"]}
        chosen.update(project.options)
        if chosen["execution"] == "standalone":
            from kiln.micro.board import StandaloneProject

            board = chosen.get("board", "host")
            standalone = StandaloneProject(Path(project_dir) / "model.tar", board,
                                           build_dir=Path(project_dir) / "build",
                                           workspace_bytes=chosen.get("workspace_size_bytes"))
            program = standalone.build_dir / ("program" if board == "host" else "program.elf")
            if not program.is_file():
                raise TVMError(f"{program} does not exist: build the project first")
            standalone.program = program
            return standalone.run(dict(inputs)).outputs
        return _run_host_driven(project, project_dir, inputs)


def _run_host_driven(project, project_dir, inputs: Mapping[str, np.ndarray]
                     ) -> list[np.ndarray]:
    from kiln.micro.session import Session, create_local_graph_executor

    library = ModelLibrary(Path(project_dir) / "model.tar", read_interface=False)
    project.flash()
    with Session(project.transport()) as session:
        if library.executor == "graph":
            runner = create_local_graph_executor(library.graph_json(),
                                                 session.get_system_lib(), session.device)
            blob = library.params_blob()
            if blob:
                runner.set_input(**load_param_dict(blob))
        else:
            runner = session.create_aot_executor()
        for name, value in inputs.items():
            runner.set_input(name, value)
        runner.run()
        return [runner.get_output(i).numpy() for i in range(runner.get_num_outputs())]
