"""Pass infrastructure: PassContext rules, Sequential, decorators, instruments, debug output."""

from __future__ import annotations

import pytest

import kiln
from kiln import relay
from kiln.ir import transform
from kiln.relay.op.tensor import add, multiply
from kiln.runtime.error import TVMError


def _module():
    x = relay.var("x", shape=(2,))
    return kiln.IRModule.from_expr(relay.Function([x], add(x, x)))


def _recording_pass(log: list, name: str, opt_level: int, required=None):
    @transform.module_pass(opt_level=opt_level, name=name, required=required)
    def record(mod, ctx):
        log.append(name)
        return mod

    return record


def test_kiln_transform_is_this_module():
    assert kiln.transform is transform


def test_sequential_skips_passes_above_opt_level():
    log: list = []
    seq = transform.Sequential([_recording_pass(log, "A", 1), _recording_pass(log, "B", 3)])
    with transform.PassContext(opt_level=2):
        seq(_module())
    assert log == ["A"]
    with transform.PassContext(opt_level=3):
        seq(_module())
    assert log == ["A", "A", "B"]


def test_disabled_beats_opt_level_and_required_beats_both():
    log: list = []
    seq = transform.Sequential([_recording_pass(log, "A", 0), _recording_pass(log, "B", 4)])
    with transform.PassContext(opt_level=3, disabled_pass=["A"], required_pass=["B"]):
        seq(_module())
    assert log == ["B"]


def test_calling_a_pass_directly_ignores_opt_level():
    log: list = []
    with transform.PassContext(opt_level=0):
        _recording_pass(log, "Heavy", 3)(_module())
    assert log == ["Heavy"]


def test_required_passes_run_first_by_name():
    log: list = []
    needs_types = _recording_pass(log, "NeedsTypes", 0, required=["InferType"])

    @transform.module_pass(opt_level=0)
    def check(mod, ctx):
        log.append(mod["main"].body.checked_type_ is not None)
        return mod

    transform.Sequential([needs_types, check])(_module())
    assert log == ["NeedsTypes", True]


def test_module_pass_on_a_class_and_its_state():
    @transform.module_pass(opt_level=1, name="Scale")
    class ScaleBody:
        def __init__(self, factor):
            self.factor = factor

        def transform_module(self, mod, ctx):
            func = mod["main"]
            new = relay.Function(func.params, multiply(func.body, relay.const(self.factor)))
            out = mod.copy()
            out["main"] = new
            return out

    scale = ScaleBody(2.0)
    assert isinstance(scale, transform.ModulePass)
    assert scale.factor == 2.0 and scale.info.name == "Scale" and scale.info.opt_level == 1
    mod = scale(_module())
    assert mod["main"].body.op.name == "multiply"


def test_module_pass_requires_opt_level_and_an_irmodule():
    with pytest.raises(ValueError, match="opt_level"):
        transform.module_pass(lambda mod, ctx: mod)
    p = transform.module_pass(lambda mod, ctx: mod, opt_level=0, name="Id")
    with pytest.raises(TypeError, match="IRModule"):
        p(relay.var("x"))
    bad = transform.module_pass(lambda mod, ctx: None, opt_level=0, name="Bad")
    with pytest.raises(TVMError, match="expected an IRModule"):
        bad(_module())


def test_function_pass_rewrites_each_function_and_retypes():
    @relay.transform.function_pass(opt_level=1)
    def double(func, mod, ctx):
        return relay.Function(func.params, multiply(func.body, relay.const(2.0)))

    mod = _module()
    mod["skip"] = relay.Function([relay.var("y", shape=(1,))], relay.const(0.0)).with_attr(
        "SkipOptimization", 1)
    out = double(mod)
    assert out["main"].body.op.name == "multiply"
    assert out["main"].body.checked_type == relay.TensorType((2,))
    assert out["skip"] is mod["skip"]
    assert mod["main"].body.op.name == "add"  # the input module is unchanged


def test_instruments_are_called_in_order():
    events: list = []

    @transform.pass_instrument
    class Recorder:
        def __init__(self, tag):
            self.tag = tag

        def enter_pass_ctx(self):
            events.append((self.tag, "enter"))

        def exit_pass_ctx(self):
            events.append((self.tag, "exit"))

        def should_run(self, mod, info):
            events.append((self.tag, "should_run", info.name))
            return True

        def run_before_pass(self, mod, info):
            events.append((self.tag, "before", info.name))

        def run_after_pass(self, mod, info):
            events.append((self.tag, "after", info.name))

    log: list = []
    with transform.PassContext(instruments=[Recorder("1"), Recorder("2")]):
        _recording_pass(log, "P", 0)(_module())
    assert events == [
        ("1", "enter"), ("2", "enter"),
        ("1", "should_run", "P"), ("2", "should_run", "P"),
        ("1", "before", "P"), ("2", "before", "P"),
        ("1", "after", "P"), ("2", "after", "P"),
        ("1", "exit"), ("2", "exit"),
    ]


def test_should_run_false_skips_the_pass():
    @transform.pass_instrument
    class SkipP:
        def should_run(self, mod, info):
            return info.name != "P"

    log: list = []
    with transform.PassContext(instruments=[SkipP()]):
        transform.Sequential([_recording_pass(log, "P", 0), _recording_pass(log, "Q", 0)])(
            _module())
    assert log == ["Q"]


def test_timing_instrument_renders_nested_passes():
    timing = transform.PassTimingInstrument()
    with transform.PassContext(instruments=[timing]):
        transform.Sequential([relay.transform.InferType()], name="outer")(_module())
        report = timing.render()
    lines = report.splitlines()
    assert lines[0].startswith("outer: ")
    assert lines[1].startswith("  InferType: ")
    assert "us" in lines[1] and "%" in lines[1]


def test_context_stack_and_current():
    assert transform.PassContext.current().opt_level == 2
    with transform.PassContext(opt_level=3):
        with transform.PassContext(opt_level=1):
            assert transform.PassContext.current().opt_level == 1
        assert transform.PassContext.current().opt_level == 3
    assert transform.PassContext.current().opt_level == 2


def test_config_keys_are_validated():
    ctx = transform.PassContext(config={"relay.FuseOps.max_depth": 4})
    assert ctx.config["relay.FuseOps.max_depth"] == 4
    with pytest.raises(TVMError, match="Invalid config option 'no.such.key'"):
        transform.PassContext(config={"no.such.key": 1})
    with pytest.raises(TVMError, match="expects a int"):
        transform.PassContext(config={"relay.FuseOps.max_depth": "deep"})
    transform.register_pass_config("tests.pass_infra.flag", bool)
    assert transform.PassContext(config={"tests.pass_infra.flag": 1}).config[
        "tests.pass_infra.flag"] is True


def test_instruments_must_be_instruments():
    with pytest.raises(TypeError, match="PassInstrument"):
        transform.PassContext(instruments=[object()])


def test_debug_level_prints_pass_names_and_ir(monkeypatch, capsys):
    monkeypatch.setenv("KILN_DEBUG", "1")
    relay.transform.InferType()(_module())
    err = capsys.readouterr().err
    assert "pass InferType:" in err and "ms" in err and "def @main" not in err
    monkeypatch.setenv("KILN_DEBUG", "2")
    relay.transform.InferType()(_module())
    err = capsys.readouterr().err
    assert "pass InferType:" in err and "@main" in err


def test_sequential_rejects_non_passes():
    with pytest.raises(TypeError, match="Sequential holds passes"):
        transform.Sequential([lambda mod: mod])


def test_function_pass_on_a_class():
    @relay.transform.function_pass(opt_level=0, name="AddOne")
    class AddConstant:
        def __init__(self, value):
            self.value = value

        def transform_function(self, func, mod, ctx):
            return relay.Function(func.params, add(func.body, relay.const(self.value)))

    out = AddConstant(1.0)(_module())
    assert out["main"].body.op.name == "add" and out["main"].body.args[1].data.numpy() == 1.0
    assert AddConstant(2.0).info.name == "AddOne"


def test_print_ir_prints_and_returns_the_module(capsys):
    mod = _module()
    assert transform.PrintIR("after")(mod) is mod
    out = capsys.readouterr().out
    assert "PrintIR(after)" in out and "@main" in out


def test_override_instruments_swaps_hooks():
    events: list = []

    @transform.pass_instrument
    class Tag:
        def __init__(self, name):
            self.name = name

        def enter_pass_ctx(self):
            events.append(("enter", self.name))

        def exit_pass_ctx(self):
            events.append(("exit", self.name))

    with transform.PassContext(instruments=[Tag("a")]) as ctx:
        ctx.override_instruments([Tag("b")])
    assert events == [("enter", "a"), ("exit", "a"), ("enter", "b"), ("exit", "b")]
