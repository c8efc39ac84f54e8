"""kiln.target.Target: TVM target strings, dicts, keys, host, scoping and errors."""

from __future__ import annotations

import pytest

from kiln.runtime.error import TVMError
from kiln.target import Target, arm_cpu, cuda, micro


def test_llvm_string_with_typed_options():
    t = Target("llvm -mcpu=znver3 -mattr=+avx2,+fma -opt-level=3 -num-cores=2 -libs=cblas")
    assert t.kind.name == "llvm"
    assert t.mcpu == "znver3"
    assert t.mattr == ["+avx2", "+fma"]
    assert t.attrs["opt-level"] == 3 and t.num_cores == 2
    assert t.libs == ["cblas"]
    assert t.keys == ("cpu",)


def test_c_target_for_cortex_m_gets_arm_cpu_key():
    t = Target("c -keys=arm_cpu -mcpu=cortex-m7 -model=stm32f746xx")
    assert t.kind.name == "c"
    assert t.keys == ("arm_cpu", "cpu")
    assert t.model == "stm32f746xx"
    assert Target("c -mcpu=cortex-m4").keys == ("arm_cpu", "cpu")
    assert Target("llvm -device=arm_cpu").keys == ("arm_cpu", "cpu")


def test_keys_option_is_prepended_once():
    assert Target("llvm -keys=x86,cpu").keys == ("x86", "cpu")


def test_boolean_flag_without_value():
    t = Target("llvm -system-lib")
    assert t.attrs["system-lib"] is True
    assert Target("llvm -system-lib=false").attrs["system-lib"] is False


def test_str_round_trips():
    text = "c -keys=arm_cpu,cpu -mcpu=cortex-m7 -model=stm32f746xx"
    assert str(Target(text)) == text
    t = Target("llvm -mcpu=znver3 -mattr=+avx2 -num-cores=2")
    assert Target(str(t)) == t
    assert str(Target("llvm")) == "llvm -keys=cpu"


def test_dict_config_and_export_round_trip():
    t = Target({"kind": "llvm", "mcpu": "znver3", "mattr": ["+fma"], "num-cores": 4})
    assert t.mcpu == "znver3" and t.mattr == ["+fma"] and t.num_cores == 4
    assert Target(t.export()) == t


def test_host_from_argument_and_dict():
    t = Target("c", host="llvm -mcpu=znver3")
    assert t.host.kind.name == "llvm" and t.host.mcpu == "znver3"
    assert Target({"kind": "cuda", "host": "llvm"}).host.kind.name == "llvm"
    assert Target("llvm").host is None
    assert Target(t).host == t.host


def test_current_and_scoping_nest():
    assert Target.current() is None
    with Target("llvm") as outer:
        assert Target.current() is outer
        with Target("c") as inner:
            assert Target.current() is inner
        assert Target.current() is outer
    assert Target.current(allow_none=True) is None
    with pytest.raises(TVMError, match="no target is in scope"):
        Target.current(allow_none=False)


def test_equality_and_hash_by_meaning():
    assert Target("llvm -mcpu=znver3") == "llvm -mcpu=znver3"
    assert {Target("c"): 1}[Target("c")] == 1
    assert Target("llvm") != Target("c")


def test_unknown_kind_is_an_error():
    with pytest.raises(TVMError, match="Unknown target kind 'foo'"):
        Target("foo -mcpu=bar")


def test_unknown_option_is_an_error_naming_it():
    with pytest.raises(TVMError, match="Unknown option '-bogus' for target kind 'llvm'"):
        Target("llvm -bogus=1")


@pytest.mark.parametrize("text, message", [
    ("llvm -num-cores=many", "expects an integer"),
    ("llvm -mcpu", "needs a value"),
    ("llvm mcpu=x", "must start with '-'"),
    ("", "empty"),
    ("llvm -system-lib=maybe", "true/false"),
])
def test_malformed_options(text, message):
    with pytest.raises(TVMError, match=message):
        Target(text)


def test_bad_config_types():
    with pytest.raises(TVMError, match="needs a 'kind'"):
        Target({"mcpu": "znver3"})
    with pytest.raises(TVMError, match="expects a string, dict or Target"):
        Target(42)
    with pytest.raises(TVMError, match="expects int"):
        Target({"kind": "llvm", "num-cores": [1]})


def test_helpers():
    assert arm_cpu("rasp4b").keys == ("arm_cpu", "cpu")
    assert arm_cpu("rasp4b").mcpu == "cortex-a72"
    assert cuda(arch="sm_80").keys == ("cuda", "gpu")
    assert cuda(arch="sm_80").attrs["arch"] == "sm_80"
    m = micro("stm32f746xx")
    assert m.kind.name == "c" and m.mcpu == "cortex-m7" and "arm_cpu" in m.keys
    with pytest.raises(TVMError, match="Unknown micro model"):
        micro("no-such-board")


def test_device_type_of_kinds():
    assert Target("llvm").device_type == 1
    assert Target("cuda").device_type == 2
