"""Model Library Format: the issue's snippet, the tar layout and metadata read back, the graph
executor + crt + link-params flavour, and reproducible exports."""

import json
import tarfile

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.micro import model_library_format as mlf
from kiln.relay.backend import Executor, Runtime
from kiln.runtime.params import load_param_dict

WEIGHT = np.linspace(-1, 1, 8 * 3 * 3 * 3, dtype="float32").reshape(8, 3, 3, 3)


def _cnn():
    data = relay.var("data", shape=(1, 3, 8, 8))
    weight = relay.var("weight", shape=(8, 3, 3, 3))
    y = relay.nn.relu(relay.nn.conv2d(data, weight, padding=(1, 1)))
    y = relay.nn.softmax(relay.nn.batch_flatten(relay.nn.max_pool2d(y, (2, 2), (2, 2))))
    return tvm.IRModule.from_expr(relay.Function([data, weight], y)), {"weight": WEIGHT}


@pytest.fixture
def standalone_crt(tmp_path, monkeypatch):
    """A stand-in CRT tree when kiln/micro/crt has not landed in this checkout."""
    real = mlf.get_standalone_crt_dir()
    import os

    if os.path.isdir(os.path.join(real, "include")):
        return real
    root = tmp_path / "crt"
    for rel in ("include/tvm/runtime/crt/module.h", "src/runtime/crt/common/crt_runtime_api.c",
                "template/crt_config-template.h", "template/platform-template.c"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"/* {rel} */\n")
    monkeypatch.setattr(mlf, "get_standalone_crt_dir", lambda: str(root))
    return str(root)


def _members(path):
    with tarfile.open(path) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None)
                for m in tar.getmembers()}


def test_issue_snippet_exports_the_aot_layout(tmp_path, standalone_crt):
    mod, params = _cnn()
    target = tvm.target.Target("c -keys=arm_cpu -mcpu=cortex-m4")
    with tvm.transform.PassContext(opt_level=3, config={"tir.disable_vectorize": True}):
        module = relay.build(mod, target=target, params=params,
                             runtime=Runtime("crt", {"system-lib": True}),
                             executor=Executor("aot", {"interface-api": "c",
                                                       "unpacked-api": True}))
    path = tvm.micro.export_model_library_format(module, tmp_path / "model.tar")
    files = _members(path)
    for name in ("./metadata.json", "./codegen/host/src/default_lib0.c",
                 "./codegen/host/src/default_lib1.c", "./codegen/host/include/tvmgen_default.h",
                 "./parameters/default.params", "./src/default.relay", "./src/relay.txt",
                 "./templates/crt_config.h.template", "./templates/platform.c.template"):
        assert name in files, name
    assert any(n.startswith("./runtime/include/") for n in files)
    lib0 = files["./codegen/host/src/default_lib0.c"].decode()
    assert "TVMSystemLibEntryPoint" in lib0 and "tvmgen_default_run" in lib0
    assert "-mcpu=cortex-m4" in files["./codegen/host/src/default_lib1.c"].decode()
    header = files["./codegen/host/include/tvmgen_default.h"].decode()
    assert "#define TVMGEN_DEFAULT_DATA_SIZE 768" in header
    assert "#define TVMGEN_DEFAULT_OUTPUT_SIZE 512" in header
    meta = mlf.read_metadata(path)
    entry = meta["modules"]["default"]
    assert entry["executors"] == ["aot"] and entry["style"] == "full-model"
    assert entry["target"] == [str(target)]
    assert entry["external_dependencies"][0]["short_name"] == "tvm_standalone_crt"
    main = entry["memory"]["functions"]["main"][0]
    assert main["inputs"] == {"data": {"size": 768, "dtype": "float32"}}
    assert main["outputs"] == {"output": {"size": 512, "dtype": "float32"}}
    assert main["io_size_bytes"] == 768 + 512
    assert main["constants_size_bytes"] == module.plan.constant_pool_size >= WEIGHT.nbytes
    pool = [p for p in entry["memory"]["pools"] if p["pool_name"] == "global_workspace"][0]
    assert pool["size_bytes"] >= pool["lower_bound_bytes"] > 0
    assert pool["size_bytes"] == module.stats["workspace_pool_bytes"]
    ops = {f["function_name"] for f in entry["memory"]["functions"]["operator_functions"]}
    assert ops == set(module.lowered)
    # the linked constants are also in the params file, byte for byte
    saved = load_param_dict(files["./parameters/default.params"])
    assert any(np.array_equal(v.numpy(), WEIGHT) or v.numpy().size == WEIGHT.size
               for v in saved.values())


def test_graph_crt_link_params_flavour(tmp_path):
    mod, params = _cnn()
    with tvm.transform.PassContext(opt_level=3):
        module = relay.build(mod, target="c", params=params,
                             runtime=Runtime("crt", {"system-lib": True}),
                             executor=Executor("graph", {"link-params": True}))
    files = _members(tvm.micro.export_model_library_format(module, tmp_path / "g.tar"))
    graph = json.loads(files["./executor-config/graph/default.graph"])
    assert files["./executor-config/graph/graph.json"] == \
        files["./executor-config/graph/default.graph"]
    assert "./runtime/include" not in files  # only AOT + crt ships the runtime (as TVM)
    lib0 = files["./codegen/host/src/default_lib0.c"].decode()
    assert "_lookup_linked_param" in lib0 and "TVMSystemLibEntryPoint" in lib0
    kernels = [n["attrs"]["func_name"] for n in graph["nodes"] if n["op"] == "tvm_op"
               and n["attrs"]["func_name"] != "__nop"]  # the C graph executor runs __nop
    for name in kernels:  # every kernel the graph calls is in the registry
        assert f"(TVMBackendPackedCFunc){name}," in lib0
    meta = mlf.read_metadata(tmp_path / "g.tar")["modules"]["default"]
    assert meta["executors"] == ["graph"]
    sids = meta["memory"]["sids"]
    assert {s["storage_id"] for s in sids} == set(graph["attrs"]["storage_id"][1])
    assert [s["input_binding"] for s in sids if "input_binding" in s][0] == "data"
    saved = load_param_dict(files["./parameters/default.params"])
    assert set(saved) == set(module.params)


def test_builds_and_exports_are_reproducible(tmp_path, standalone_crt):
    tars = []
    for name in ("a", "b"):  # two independent builds of the same model
        mod, params = _cnn()
        config = {"tir.usmp.algorithm": "hill_climb"}
        with tvm.transform.PassContext(opt_level=3, config=config):
            module = relay.build(mod, "c", params=params, runtime=Runtime("crt"),
                                 executor=Executor("aot"))
        path = tvm.micro.export_model_library_format(module, tmp_path / f"{name}.tar")
        tars.append(path.read_bytes())
    assert tars[0] == tars[1]


def test_bad_exports_and_bad_tars_are_refused(tmp_path):
    with pytest.raises(tvm.TVMError, match="Don't know how to export"):
        tvm.micro.export_model_library_format(object(), tmp_path / "x.tar")
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    with pytest.raises(tvm.TVMError, match="not a Model Library Format tar"):
        mlf.read_metadata(tmp_path / "junk.tar")


def test_several_modules_in_one_archive(tmp_path, standalone_crt):
    mod, params = _cnn()
    built = []
    for name in ("vision", "audio"):
        with tvm.transform.PassContext(opt_level=3):
            built.append(relay.build(mod, "c", params=params, mod_name=name,
                                     runtime=Runtime("crt"),
                                     executor=Executor("aot", {"interface-api": "c",
                                                               "unpacked-api": True})))
    files = _members(tvm.micro.export_model_library_format(built, tmp_path / "two.tar"))
    meta = json.loads(files["./metadata.json"])
    assert sorted(meta["modules"]) == ["audio", "vision"]
    for name in ("vision", "audio"):
        assert f"./codegen/host/src/{name}_lib0.c" in files
        assert f"./codegen/host/include/tvmgen_{name}.h" in files
        assert f"./parameters/{name}.params" in files
    assert "./src/relay.txt" not in files  # the single-model name would be ambiguous
    with pytest.raises(tvm.TVMError, match="unique names"):
        tvm.micro.export_model_library_format([built[0], built[0]], tmp_path / "dup.tar")
