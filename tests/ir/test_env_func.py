"""tvm.ir.EnvFunc: a registered global by name, callable and serializable."""

from __future__ import annotations

import pytest

import kiln
from kiln import ir


def test_env_func_calls_the_global_and_round_trips_through_json():
    @kiln.register_func("test.env_func.add_one", override=True)
    def add_one(x):
        return x + 1

    f = ir.EnvFunc.get("test.env_func.add_one")
    assert f(41) == 42 and f.func(1) == 2
    back = kiln.ir.load_json(kiln.ir.save_json(f))
    assert isinstance(back, ir.EnvFunc) and back.name == "test.env_func.add_one"
    assert back(2) == 3

    kiln.register_func("test.env_func.add_one", lambda x: x + 10, override=True)
    assert back(2) == 12  # looked up at call time, as TVM's registry lookup


def test_env_func_errors_name_the_function():
    with pytest.raises(kiln.TVMError, match="no global function 'test.env_func.missing'"):
        ir.EnvFunc.get("test.env_func.missing")
    with pytest.raises(kiln.TVMError, match="expected a function name"):
        ir.EnvFunc.get(3)
    with pytest.raises(kiln.TVMError, match="no longer registered"):
        ir.EnvFunc("test.env_func.gone")(1)
