"""tvm.parser.parse(source, init_module=..., init_meta_table=...)."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay


def _run(mod, *args):
    return relay.create_executor("debug", mod=mod).evaluate()(*args).numpy()


def test_text_calls_a_function_and_uses_an_adt_of_init_module():
    base = kiln.parser.parse("""
    #[version = "0.0.5"]
    type Box[A] { MkBox(A) }
    def @double(%x: Tensor[(2,), float32]) -> Tensor[(2,), float32] { add(%x, %x) }
    """)
    mod = kiln.parser.parse("""
    #[version = "0.0.5"]
    def @main(%y: Tensor[(2,), float32]) -> Tensor[(2,), float32] {
      match (MkBox(@double(%y))) { MkBox(%v) => negative(%v) }
    }
    """, init_module=base)
    assert sorted(gv.name_hint for gv in mod.get_global_vars()) == ["double", "main"]
    x = np.array([1.0, -2.0], "float32")
    np.testing.assert_allclose(_run(mod, x), -2 * x)
    assert "main" not in base  # init_module itself is unchanged


def test_init_meta_table_serves_meta_references():
    c = relay.const(np.array([3.0, 4.0], "float32"))
    mod = kiln.parser.parse("""
    #[version = "0.0.5"]
    def @main(%x: Tensor[(2,), float32]) { multiply(%x, meta[relay.Constant][0]) }
    """, init_meta_table={"relay.Constant": [c]})
    np.testing.assert_allclose(_run(mod, np.ones(2, "float32")), [3.0, 4.0])


def test_bad_init_arguments_and_redefinitions_raise():
    base = kiln.parser.parse('#[version = "0.0.5"]\ndef @main() { 1f }')
    with pytest.raises(kiln.error.DiagnosticError, match="@main is defined both"):
        kiln.parser.parse('#[version = "0.0.5"]\ndef @main() { 2f }', init_module=base)
    with pytest.raises(kiln.error.DiagnosticError, match="init_module must be an IRModule"):
        kiln.parser.parse('def @f() { 1f }', init_module={"f": 1})
    with pytest.raises(kiln.error.DiagnosticError, match="init_meta_table must map"):
        kiln.parser.parse('def @f() { 1f }', init_meta_table={"relay.Constant": 3})
    with pytest.raises(kiln.error.DiagnosticError, match="not in the metadata section"):
        kiln.parser.parse('def @f() { meta[relay.Constant][0] }', init_meta_table={})
