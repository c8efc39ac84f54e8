"""The three benchmark models (kiln.relay.testing.micro_models) built as Model Library Format
archives for a Cortex-M4 (AOT C interface, and the C graph executor with linked params), run
standalone on the host and on the emulated Cortex-M (QEMU), against the host graph executor
(target llvm) as the oracle. Each archive is built once per module; each program once."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln as tvm
from kiln import relay
from kiln.contrib import graph_executor
from kiln.micro.board import MicroBoardError, StandaloneProject
from kiln.relay.backend import Executor, Runtime
from kiln.relay.testing import micro_models

TARGET = "c -keys=arm_cpu -mcpu=cortex-m4"
BOARDS = ["host", "qemu-cortex-m4"]
EXECUTORS = {"aot": Executor("aot", {"interface-api": "c", "unpacked-api": True}),
             "graph": Executor("graph", {"link-params": True}),
             "graph-params": Executor("graph", {"link-params": False})}


class Model:
    """One model: its archives per executor, its input and the oracle's output."""

    def __init__(self, name: str, tmp_path_factory) -> None:
        self.name = name
        layers = micro_models.MODELS[name]()
        self.mod, self.params = micro_models.to_relay(layers)
        self.x = layers.random_input()
        with tvm.transform.PassContext(opt_level=3):
            lib = relay.build(self.mod, target="llvm", params=self.params)
        ref = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        ref.set_input("input", self.x)
        ref.run()
        self.want = ref.get_output(0).numpy()
        self.dir = tmp_path_factory.mktemp(name)
        self._archives: dict[str, str] = {}
        self._projects: dict[tuple[str, str], StandaloneProject] = {}

    def archive(self, executor: str) -> str:
        if executor not in self._archives:
            with tvm.transform.PassContext(opt_level=3,
                                           config={"tir.disable_vectorize": True}):
                module = relay.build(self.mod, target=tvm.target.Target(TARGET),
                                     params=self.params, executor=EXECUTORS[executor],
                                     runtime=Runtime("crt", {"system-lib": True}))
            path = str(self.dir / f"{executor}.tar")
            tvm.micro.export_model_library_format(module, path)
            self._archives[executor] = path
        return self._archives[executor]

    def project(self, executor: str, board: str) -> StandaloneProject:
        key = (executor, board)
        if key not in self._projects:
            project = StandaloneProject(self.archive(executor), board,
                                        build_dir=self.dir / f"{executor}-{board}")
            project.build()
            self._projects[key] = project
        return self._projects[key]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return {name: Model(name, tmp_path_factory) for name in micro_models.MODELS}


@pytest.mark.parametrize("board", BOARDS)
@pytest.mark.parametrize("executor", ["aot", "graph"])
@pytest.mark.parametrize("name", list(micro_models.MODELS))
def test_standalone_output_matches_the_host_graph_executor(models, name, executor, board):
    model = models[name]
    result = model.project(executor, board).run({"input": model.x})
    assert result.outputs[0].shape == model.want.shape
    np.testing.assert_allclose(result.outputs[0], model.want, rtol=1e-4, atol=1e-6)
    assert result.ticks > 0


def test_cortex_m4_instruction_counts_are_exact_and_repeatable(models):
    project = models["mlp"].project("aot", "qemu-cortex-m4")
    first = project.run([models["mlp"].x])
    second = project.run([models["mlp"].x])
    assert first.instructions == first.ticks * 40
    assert first.instructions == second.instructions
    # 490*128 + 128*64 + 64*12 multiply-adds: at least one instruction each
    assert 71_000 < first.instructions < 2_000_000
    assert 0 < first.stack_bytes < 64 * 1024


def test_the_same_archive_runs_on_the_cortex_m7(models):
    model = models["kws_dscnn"]
    project = StandaloneProject(model.archive("aot"), "qemu-cortex-m7",
                                build_dir=model.dir / "aot-m7")
    result = project.run([model.x])
    np.testing.assert_allclose(result.outputs[0], model.want, rtol=1e-4, atol=1e-6)


def test_dense_layers_use_the_import_c_micro_kernel(models, tmp_path):
    # The archive's generated C holds the hand-written kernel that the tests above ran.
    import tarfile

    with tarfile.open(models["mlp"].archive("aot")) as tar:
        sources = [tar.extractfile(m).read().decode() for m in tar.getmembers()
                   if m.name.startswith("./codegen/host/src/") or
                   m.name.startswith("codegen/host/src/")]
    text = "\n".join(sources)
    assert "imported by pragma import_c" in text and "kiln_gemv_f32_8(" in text


def test_inputs_are_checked_before_the_program_runs(models):
    project = models["mlp"].project("aot", "host")
    with pytest.raises(MicroBoardError, match="Could not find 'nope'"):
        project.run({"nope": models["mlp"].x})
    with pytest.raises(MicroBoardError, match="must be float32 of 1960 bytes"):
        project.run([models["mlp"].x.astype("float64")])
    with pytest.raises(MicroBoardError, match="takes 1 inputs, got 2"):
        project.run([models["mlp"].x, models["mlp"].x])


def test_kiln_micro_run_cli(models, tmp_path, capsys):
    from kiln.driver.cli import main

    model = models["mlp"]
    np.savez(tmp_path / "in.npz", input=model.x)
    code = main(["micro", "run", model.archive("aot"), "--board", "host", "--inputs",
                 str(tmp_path / "in.npz"), "--outputs", str(tmp_path / "out.npz"),
                 "--io", "console"])
    assert code == 0
    out = capsys.readouterr().out
    assert "output: shape [1, 12] float32" in out and "ticks at 1000 MHz" in out
    saved = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(saved["output"], model.want, rtol=1e-4, atol=1e-6)
    assert main(["micro", "run", model.archive("aot"), "--board", "qemu-cortex-m0"]) == 1
    assert "unknown board 'qemu-cortex-m0'" in capsys.readouterr().err


def test_graph_executor_loads_unlinked_params_from_the_archive(models):
    # link-params False: the glue embeds parameters/*.params and calls LoadParams.
    model = models["mlp"]
    project = model.project("graph-params", "host")
    assert "TVMGraphExecutor_LoadParams" in (project.build_dir / "kiln_model.c").read_text()
    result = project.run([model.x])
    np.testing.assert_allclose(result.outputs[0], model.want, rtol=1e-4, atol=1e-6)


def test_a_corrupt_archive_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"not a tar at all")
    with pytest.raises(MicroBoardError, match="not a Model Library Format tar"):
        StandaloneProject(bad, "host")


def test_linked_inputs_and_uart_outputs(models, tmp_path):
    # io="linked": no semihosting files; each run relinks its inputs into the image and the
    # outputs come back as hex lines on the UART.
    model = models["mlp"]
    project = StandaloneProject(model.archive("aot"), "qemu-cortex-m4",
                                build_dir=tmp_path / "linked", io="linked")
    result = project.run([model.x])
    np.testing.assert_allclose(result.outputs[0], model.want, rtol=1e-4, atol=1e-6)
    assert "kiln-output 0 0 " in result.console
    other = micro_models.mlp().random_input(seed=9)
    again = project.run([other])
    assert not np.allclose(again.outputs[0], result.outputs[0])


@pytest.mark.parametrize("board", BOARDS)
def test_inputs_and_outputs_over_the_console(models, board, tmp_path):
    # io="console": the program asks with "kiln-ready", the inputs arrive over the UART
    # (stdin on the host), the outputs leave as hex lines; the graph executor this time.
    model = models["mlp"]
    project = StandaloneProject(model.archive("graph"), board, build_dir=tmp_path / "c",
                                io="console")
    result = project.run([model.x])
    np.testing.assert_allclose(result.outputs[0], model.want, rtol=1e-4, atol=1e-6)
    assert "kiln-ready" in result.console


def test_graph_executor_out_of_workspace_is_an_error_not_a_crash(models, tmp_path):
    # The page allocator runs dry while the C graph executor sets up its storage:
    # kTvmErrorPlatformNoMemory (0x503) comes back through kiln_model_init.
    model = models["mlp"]
    project = StandaloneProject(model.archive("graph"), "host", build_dir=tmp_path / "small",
                                workspace_bytes=4 * 1024)
    with pytest.raises(MicroBoardError, match=r"(?s)failed to initialize.*0x503"):
        project.run([model.x])


def test_io_inside_the_workspace_pool(models, tmp_path):
    # tir.usmp.use_workspace_io: the program finds its inputs and outputs in the pool it
    # provides (map_inputs/map_outputs), so the image has no separate I/O buffers.
    from kiln.micro.board.qemu import size_of

    model = models["mlp"]
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True,
                                                        "tir.usmp.use_workspace_io": True}):
        module = relay.build(model.mod, target=tvm.target.Target(TARGET), params=model.params,
                             executor=EXECUTORS["aot"], runtime=Runtime("crt",
                                                                        {"system-lib": True}))
    tvm.micro.export_model_library_format(module, str(tmp_path / "io.tar"))
    project = StandaloneProject(tmp_path / "io.tar", "qemu-cortex-m4", build_dir=tmp_path / "b")
    result = project.run([model.x])
    np.testing.assert_allclose(result.outputs[0], model.want, rtol=1e-4, atol=1e-6)
    sizes = size_of(project.program)
    assert sizes.get(".kiln_io", 0) == 0
    assert sizes[".tvm_workspace"] == module.stats["workspace_pool_bytes"] >= 1960 + 48


def test_an_archive_escaping_its_directory_is_refused(tmp_path):
    import io
    import tarfile

    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(MicroBoardError, match=r"member '\.\./escaped\.txt' has a '\.\.' component"):
        StandaloneProject(path, "host")
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_onnx_to_cortex_m_from_the_command_line(tmp_path, capsys):
    # The workflow: kiln compile --runtime crt, then kiln micro run on the board;
    # onnxruntime is the oracle.
    from kiln.driver.cli import main

    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((24, 10)).astype("float32"), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w])
    model = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
    x = rng.standard_normal((1, 24)).astype("float32")
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["compile", str(model), "--target", "c -mcpu=cortex-m4", "--executor", "aot",
                 "--runtime", "crt", "-o", str(tmp_path / "model.tar")]) == 0
    assert main(["micro", "run", str(tmp_path / "model.tar"), "--board", "qemu-cortex-m4",
                 "--inputs", str(tmp_path / "in.npz"), "--outputs",
                 str(tmp_path / "out.npz")]) == 0
    assert "cycles at 25 MHz" in (out := capsys.readouterr().out)
    assert "instructions per inference" in out
    want = ort.InferenceSession(str(model)).run(None, {"x": x})[0]
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got[got.files[0]], want, rtol=1e-5, atol=1e-6)


def test_user_memory_pools(models, tmp_path):
    # External pools (TVM's WorkspaceMemoryPools / ConstantMemoryPools): the program provides
    # the SRAM pool and the flash pool, the latter filled from <POOL>_CONSTANT_POOL_DATA.
    from kiln.ir.memory_pools import (
        ConstantMemoryPools,
        ConstantPoolInfo,
        WorkspaceMemoryPools,
        WorkspacePoolInfo,
    )
    from kiln.micro.board.qemu import size_of

    model = models["mlp"]
    target = tvm.target.Target(TARGET)
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        module = relay.build(
            model.mod, target=target, params=model.params, executor=EXECUTORS["aot"],
            runtime=Runtime("crt", {"system-lib": True}),
            workspace_memory_pools=WorkspaceMemoryPools([WorkspacePoolInfo("sram", [target])]),
            constant_memory_pools=ConstantMemoryPools([ConstantPoolInfo("flash", [target])]))
    tvm.micro.export_model_library_format(module, str(tmp_path / "pools.tar"))
    project = StandaloneProject(tmp_path / "pools.tar", "qemu-cortex-m4", build_dir=tmp_path / "b")
    result = project.run([model.x])
    np.testing.assert_allclose(result.outputs[0], model.want, rtol=1e-4, atol=1e-6)
    sizes = size_of(project.program)
    weights = sum(p.size for p in model.params.values()) * 4
    assert sizes[".rodata"] >= weights and sizes[".tvm_workspace"] < 4096


def test_the_packed_aot_interface_is_refused_with_the_fix(models, tmp_path):
    model = models["mlp"]
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        module = relay.build(model.mod, target=tvm.target.Target(TARGET), params=model.params,
                             executor=Executor("aot", {"interface-api": "packed"}),
                             runtime=Runtime("crt", {"system-lib": True}))
    tvm.micro.export_model_library_format(module, str(tmp_path / "packed.tar"))
    with pytest.raises(MicroBoardError, match="interface-api.*unpacked-api"):
        StandaloneProject(tmp_path / "packed.tar", "host")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MicroBoardError, match="no metadata.json"):
        StandaloneProject(tmp_path / "empty", "host")
