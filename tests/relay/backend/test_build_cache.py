"""The whole-build cache of relay.build: hits, what invalidates an entry, corrupt entries."""

import numpy as np
import pytest

import kiln as tvm
from kiln import relay
from kiln.contrib.graph_executor import GraphModule
from kiln.ir.instrument import PassInstrument
from kiln.ir.op import register_op_attr
from kiln.relay.backend import build_cache


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test starts from an empty cache directory, with the build cache on."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KILN_BUILD_CACHE", "1")
    return tmp_path


def _model(name="x", scale=2.0):
    """relu(x * w + 1) with a constant weight; numpy gives the expected output."""
    x = relay.var(name, shape=(2, 3), dtype="float32")
    w = np.full((2, 3), scale, "float32")
    body = relay.nn.relu(relay.add(relay.multiply(x, relay.const(w)), relay.const(1.0)))
    return tvm.IRModule.from_expr(relay.Function([x], body)), w


def _build(mod, target="c", params=None, **ctx):
    with tvm.transform.PassContext(opt_level=ctx.pop("opt_level", 3), **ctx):
        return relay.build(mod, target=target, params=params)


def _run(lib, name="x"):
    x = np.arange(-3, 3, dtype="float32").reshape(2, 3)
    gmod = GraphModule(lib[lib.libmod_name](tvm.cpu(0)))
    gmod.set_input(name, x)
    gmod.run()
    return x, gmod.get_output(0).numpy()


def _entries(cache):
    return sorted(p.name for p in (cache / "build").iterdir()) if (cache / "build").exists() \
        else []


def test_second_build_is_a_hit_with_the_same_results(private_cache):
    mod, w = _model()
    first = _build(mod)
    second = _build(mod)
    assert (first.stats["build_cache"], second.stats["build_cache"]) == ("miss", "hit")
    assert len(_entries(private_cache)) == 1
    x, out = _run(second)
    np.testing.assert_allclose(out, np.maximum(x * w + 1, 0))
    assert second.get_graph_json() == first.get_graph_json()
    assert second.get_lib().get_source("c") == first.get_lib().get_source("c")


def test_a_hit_remakes_the_optimized_module_and_kernels_on_request():
    mod, _ = _model()
    first = _build(mod)
    second = _build(mod)
    assert second.stats["build_cache"] == "hit"
    assert sorted(second.lowered) == sorted(first.lowered)
    assert [p.name_hint for p in second.ir_mod["main"].params] == ["x"]


def test_llvm_hit_keeps_ir_and_assembly():
    pytest.importorskip("llvmlite")
    mod, w = _model()
    first = _build(mod, "llvm")
    second = _build(mod, "llvm")
    assert second.stats["build_cache"] == "hit"
    assert second.get_lib().get_source("ll") == first.get_lib().get_source("ll")
    assert "ret" in second.get_lib().get_source("asm")
    x, out = _run(second)
    np.testing.assert_allclose(out, np.maximum(x * w + 1, 0))


def test_another_input_shape_is_a_miss():
    x = relay.var("x", shape=(2, 3))
    _build(tvm.IRModule.from_expr(relay.Function([x], relay.exp(x))))
    y = relay.var("x", shape=(4, 3))
    lib = _build(tvm.IRModule.from_expr(relay.Function([y], relay.exp(y))))
    assert lib.stats["build_cache"] == "miss"
    data = np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)
    gmod = GraphModule(lib["default"](tvm.cpu(0)))
    gmod.set_input("x", data)
    gmod.run()
    np.testing.assert_allclose(gmod.get_output(0).numpy(), np.exp(data), rtol=1e-6)


def test_attributes_hashing_alike_are_told_apart():
    """Python hashes -1 and -2 alike, and so does the structural hash."""
    x = relay.var("x", shape=(2, 3, 4))
    _build(tvm.IRModule.from_expr(relay.Function([x], relay.sum(x, axis=-1))))
    lib = _build(tvm.IRModule.from_expr(relay.Function([x], relay.sum(x, axis=-2))))
    assert lib.stats["build_cache"] == "miss"
    data = np.arange(24, dtype="float32").reshape(2, 3, 4)
    gmod = GraphModule(lib["default"](tvm.cpu(0)))
    gmod.set_input("x", data)
    gmod.run()
    np.testing.assert_allclose(gmod.get_output(0).numpy(), data.sum(axis=-2))


@pytest.mark.parametrize("change", ["weights", "input name", "target", "opt_level",
                                    "disabled_pass", "config", "mod_name", "params",
                                    "kiln source"])
def test_any_change_of_the_inputs_is_a_miss(change, monkeypatch, private_cache):
    mod, w = _model()
    _build(mod)
    name, target, ctx, params, mod_name = "x", "c", {}, None, "default"
    if change == "weights":
        mod, w = _model(scale=3.0)
    elif change == "input name":
        name = "y"
        mod, w = _model(name)
    elif change == "target":
        target = "c -mcpu=x86-64"
    elif change == "opt_level":
        ctx = {"opt_level": 2}
    elif change == "disabled_pass":
        ctx = {"disabled_pass": ["FoldConstant"]}
    elif change == "config":
        ctx = {"config": {"relay.FuseOps.max_depth": 2}}
    elif change == "params":
        v = relay.var("v", shape=(2, 3))
        x = relay.var("x", shape=(2, 3))
        mod = tvm.IRModule.from_expr(relay.Function([x, v], relay.nn.relu(x * v + 1.0)))
        _build(mod, params={"v": w})
        params = {"v": w + 1}
        w = w + 1
    elif change == "kiln source":
        monkeypatch.setattr(build_cache, "_kiln_fingerprint", lambda: "edited")
    with tvm.transform.PassContext(opt_level=ctx.pop("opt_level", 3), **ctx):
        lib = relay.build(mod, target=target, params=params, mod_name=mod_name) \
            if change != "mod_name" else relay.build(mod, target=target, mod_name="other")
    assert lib.stats["build_cache"] == "miss"
    x, out = _run(lib, name)
    np.testing.assert_allclose(out, np.maximum(x * w + 1, 0))


def test_a_strategy_registered_outside_kiln_changes_the_key():
    mod, _ = _model()
    targets, host = relay.build_module.parse_targets("c")
    before = build_cache.build_key(mod, None, targets, host, "default")

    def probe_attr(attrs, inputs, out_type):
        return inputs

    register_op_attr("exp", "TestBuildCacheAttr", probe_attr, level=10)
    try:
        after = build_cache.build_key(mod, None, targets, host, "default")
    finally:
        tvm.ir.op.get("exp").reset_attr("TestBuildCacheAttr")
    assert before != after
    assert build_cache.build_key(mod, None, targets, host, "default") == before


def test_instruments_and_the_env_var_turn_the_cache_off(monkeypatch, private_cache):
    class Count(PassInstrument):
        def __init__(self):
            self.passes = 0

        def run_before_pass(self, mod, info):
            self.passes += 1

    mod, _ = _model()
    _build(mod)
    count = Count()
    assert _build(mod, instruments=[count]).stats["build_cache"] == "off"
    assert count.passes > 0
    monkeypatch.setenv("KILN_BUILD_CACHE", "0")
    assert _build(mod).stats["build_cache"] == "off"


def _an_object(entry):
    """One of the kernel objects of a stored build (LLVM emits one per kernel)."""
    return sorted(entry.glob("0_*.o"))[0]


@pytest.mark.parametrize("damage", ["truncated params", "flipped byte", "garbage meta",
                                    "missing object", "wrong layout"])
def test_a_corrupt_entry_is_ignored_with_a_warning_and_rebuilt(damage, private_cache):
    pytest.importorskip("llvmlite")
    mod, w = _model()
    _build(mod, "llvm")
    (entry,) = (private_cache / "build").iterdir()
    if damage == "truncated params":
        data = (entry / "params.bin").read_bytes()
        (entry / "params.bin").write_bytes(data[: len(data) // 2])
    elif damage == "flipped byte":
        data = bytearray(_an_object(entry).read_bytes())
        data[len(data) // 2] ^= 0xFF
        _an_object(entry).write_bytes(bytes(data))
    elif damage == "garbage meta":
        (entry / "meta.json").write_text("{not json")
    elif damage == "missing object":
        _an_object(entry).unlink()
    else:
        text = (entry / "meta.json").read_text()
        (entry / "meta.json").write_text(text.replace(build_cache.LAYOUT_VERSION, "old"))
    with pytest.warns(UserWarning, match="ignoring the unreadable entry"):
        lib = _build(mod, "llvm")
    assert lib.stats["build_cache"] == "miss"
    x, out = _run(lib)
    np.testing.assert_allclose(out, np.maximum(x * w + 1, 0))
    assert _build(mod, "llvm").stats["build_cache"] == "hit"


def _no_lowering(*args, **kwargs):
    raise AssertionError("lower_primitive ran: the kernel should come from the disk cache")


def test_lowered_kernels_are_reused_across_models_and_names(monkeypatch, private_cache):
    """Other weights (a whole-build miss) and another mod_name (other kernel names) lower
    nothing: every fused group is on disk."""
    from kiln.relay.backend import te_compiler

    mod, _ = _model()
    _build(mod)
    assert len(list((private_cache / "lower").iterdir())) == 1
    monkeypatch.setattr(te_compiler, "lower_primitive", _no_lowering)
    mod, w = _model(scale=-1.5)
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(mod, target="c", mod_name="other")
    assert lib.stats["build_cache"] == "miss"
    assert "tvmgen_other_fused" in lib.get_lib().get_source("c")
    x, out = _run(lib)
    np.testing.assert_allclose(out, np.maximum(x * w + 1, 0))


def test_a_corrupt_lowered_kernel_is_lowered_again_with_a_warning(private_cache):
    mod, w = _model()
    _build(mod)
    (kernel,) = (private_cache / "lower").iterdir()
    kernel.write_bytes(kernel.read_bytes()[:40])
    with pytest.warns(UserWarning, match="ignoring the unreadable"):
        lib = _build(*_model(scale=4.0)[:1])
    x, out = _run(lib)
    np.testing.assert_allclose(out, np.maximum(x * 4.0 + 1, 0))
    assert len(list((private_cache / "lower").iterdir())) == 1


def test_the_lowering_cache_is_off_with_the_build_cache(monkeypatch, private_cache):
    monkeypatch.setenv("KILN_BUILD_CACHE", "0")
    _build(_model()[0])
    assert not (private_cache / "lower").exists()


def test_an_evictor_and_a_loader_never_lose_an_entry_in_use(private_cache, monkeypatch):
    """The evictor looks (the entry unused for an hour), a loader finds and touches it, the
    evictor renames it away and the loader's reads fail, the evictor sees the touch and puts
    it back, and the loader deleted it as unreadable. Now a loader keeps evictors out while
    it reads (kiln.runtime.disk_cache.reading), so either the eviction ends first (the
    entry really was unused) or the load does."""
    import os
    import threading
    import time
    import warnings

    from kiln.runtime import disk_cache

    mod, w = _model()
    _build(mod)
    (entry,) = (private_cache / "build").iterdir()
    hour_ago = time.time() - 3600
    os.utime(entry, (hour_ago, hour_ago))
    steps = {name: threading.Event() for name in ("looked", "touched", "moved", "failed",
                                                   "restored")}
    rename, touch, warn = os.rename, disk_cache.touch, warnings.warn

    def evictor_rename(src, dst):  # the evictor's moves of the build folder, in step
        if os.path.basename(str(src)) == entry.name:
            steps["looked"].set()
            steps["touched"].wait(0.5)
            rename(src, dst)
            steps["moved"].set()
            steps["failed"].wait(0.5)
            return None
        rename(src, dst)
        if os.path.basename(str(dst)) == entry.name:
            steps["restored"].set()
        return None

    def loader_touch(path):
        found = touch(path)
        if os.path.basename(str(path)) == entry.name:
            steps["touched"].set()
            steps["moved"].wait(0.5)
        return found

    def loader_warn(*args, **kwargs):
        steps["failed"].set()
        steps["restored"].wait(0.5)
        return warn(*args, **kwargs)

    monkeypatch.setattr(os, "rename", evictor_rename)
    monkeypatch.setattr(disk_cache, "touch", loader_touch)
    monkeypatch.setattr(warnings, "warn", loader_warn)
    removed = []
    evictor = threading.Thread(target=lambda: removed.append(disk_cache.evict(1, wait=True)))
    evictor.start()
    assert steps["looked"].wait(10)
    loaded = build_cache.load_build(entry.name, tvm.target.Target("c"))
    evictor.join()
    # loaded and kept, or evicted (unused) before the load looked: never lost while in use
    assert (loaded is not None and entry.exists()) or (removed[0] > 0 and not entry.exists())
    assert not steps["failed"].is_set()  # a valid entry is never called unreadable
