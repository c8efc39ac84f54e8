"""The IR core reaches Relay and TIR only through hooks they register (kiln.ir.hooks)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import kiln
from kiln.ir import hooks


def test_an_unknown_hook_is_refused_by_name():
    with pytest.raises(kiln.TVMError, match="unknown IR hook 'emit_c'"):
        hooks.register_hook("emit_c", print)


def test_every_hook_is_registered_by_its_provider():
    for name, (provider, _) in hooks.HOOK_PROVIDERS.items():
        assert callable(hooks.get_hook(name)), (name, provider)


def test_the_ir_core_imports_only_the_layer_a_hook_needs():
    # PrimExpr arithmetic needs kiln.tir, not Relay; a GlobalVar call needs Relay.
    code = (
        "import sys, kiln.ir.expr as e\n"
        "assert (e.IntImm('int32', 3) * 2).value == 6\n"
        "assert 'kiln.tir' in sys.modules and 'kiln.relay' not in sys.modules\n"
        "from kiln import relay\n"
        "call = e.GlobalVar('f')(relay.var('x'))\n"
        "assert type(call).__name__ == 'Call' and call.op.name_hint == 'f'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
