"""TVM's microTVM tutorial flow, unchanged, on kiln's two template projects: relay.build with
the crt runtime -> generate_project -> build -> flash -> Session -> host-driven graph executor
or the device's AOT executor; outputs equal kiln's x86 graph executor's. Also the device timer
through time_evaluator, and a device that aborts or is killed mid-session.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.micro import Session, create_local_graph_executor
from kiln.micro.board import get_board
from kiln.micro.transport import SubprocessTransport, TransportTimeouts
from kiln.relay.backend import Executor, Runtime

RNG = np.random.default_rng(7)


def _model():
    """A small CNN: conv2d + bias + relu + dense, with params sent over the link."""
    x = relay.var("x", shape=(1, 2, 6, 6), dtype="float32")
    k = relay.var("k", shape=(3, 2, 3, 3), dtype="float32")
    b = relay.var("b", shape=(3,), dtype="float32")
    w = relay.var("w", shape=(5, 27), dtype="float32")
    y = relay.nn.relu(relay.nn.bias_add(relay.nn.conv2d(x, k, padding=(1, 1)), b))
    y = relay.nn.max_pool2d(y, (2, 2), (2, 2))
    out = relay.nn.dense(relay.reshape(y, (1, 27)), w)
    params = {"k": RNG.standard_normal((3, 2, 3, 3), "float32"),
              "b": RNG.standard_normal(3, "float32"),
              "w": RNG.standard_normal((5, 27), "float32")}
    return tvm.IRModule.from_expr(relay.Function([x, k, b, w], out)), params


@pytest.fixture(scope="module")
def model():
    mod, params = _model()
    data = RNG.standard_normal((1, 2, 6, 6), "float32")
    with tvm.transform.PassContext(opt_level=3):
        ref = relay.build(mod, target="llvm", params=params)
    gmod = graph_executor.GraphModule(ref["default"](tvm.cpu(0)))
    gmod.set_input(x=data)
    gmod.run()
    return mod, params, data, gmod.get_output(0).numpy()


def _build_for(mod, params, executor, target="c"):
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        return relay.build(mod, target=target, runtime=Runtime("crt", {"system-lib": True}),
                           executor=Executor(executor), params=params)


@pytest.mark.parametrize("template, executor",
                         [("crt", "graph"), ("crt", "aot"), ("qemu-cortex-m", "graph"),
                          ("qemu-cortex-m", "aot")])
def test_tutorial_flow(tmp_path, model, template, executor):
    mod, params, data, expected = model
    target = "c" if template == "crt" else get_board("qemu-cortex-m4").target
    module = _build_for(mod, params, executor, target)
    project = tvm.micro.generate_project(
        tvm.micro.get_microtvm_template_projects(template), module, tmp_path / "project",
        {"verbose": False})
    try:
        project.build()
        project.flash()
        with Session(project.transport()) as session:
            if executor == "graph":
                runner = create_local_graph_executor(
                    module.get_graph_json(), session.get_system_lib(), session.device)
                runner.set_input(**module.get_params())
            else:
                runner = session.create_aot_executor()
            runner.set_input("x", data)
            runner.run()
            out = runner.get_output(0).numpy()
    finally:
        project.close()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def host_program(tmp_path_factory, model):
    from kiln.micro.board import StandaloneProject

    mod, params, _, _ = model
    out = tmp_path_factory.mktemp("host_driven")
    module = _build_for(mod, params, "graph")
    tvm.micro.export_model_library_format(module, out / "model.tar")
    project = StandaloneProject(out / "model.tar", "host", build_dir=out / "build",
                                execution="host-driven")
    return project.build(), module


FAST = TransportTimeouts(0.5, 10.0, 10.0)


def test_time_evaluator_uses_the_device_timer(host_program):
    program, module = host_program
    with Session(SubprocessTransport([str(program)], FAST)) as session:
        lib = session.get_system_lib()
        runner = create_local_graph_executor(module.get_graph_json(), lib, session.device)
        runner.set_input(**module.get_params())
        _, arrays = runner._ops[0]
        name = [n.func_name for n in runner.graph.nodes if n.op == "tvm_op"][0]
        timer = lib.time_evaluator(name, session.device, number=5, repeat=3)
        result = timer(*arrays)
        assert len(result.results) == 3 and all(0 < t < 1 for t in result.results)


def test_device_abort_gives_session_terminated(host_program):
    program, _ = host_program
    with pytest.raises(tvm.micro.SessionTerminatedError):
        with Session(SubprocessTransport([str(program)], FAST)) as session:
            session.get_function("kiln.testing.abort")()


def test_killed_device_gives_session_terminated(host_program):
    program, _ = host_program
    transport = SubprocessTransport([str(program)], FAST)
    with pytest.raises(tvm.micro.SessionTerminatedError):
        with Session(transport) as session:
            lib = session.get_system_lib()
            transport.proc.kill()
            lib.get_function("no_such_function_either_way")


def test_session_needs_a_transport():
    with pytest.raises(tvm.TVMError, match="needs a transport"):
        Session()
