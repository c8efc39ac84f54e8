"""Every registered operator has the rules its users need (docs/adding_an_op.md).

The test walks the whole registry after loading every module that registers rules, so a new
op that forgets a step fails here with its name. Exceptions are explicit, each with the reason
the op does not need the rule. It also checks that every rule is registered by a family module
(a module that defines ops: ``kiln/relay/op/<family>.py``, ``kiln/relay/qnn/<family>.py``),
never by a central table elsewhere.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import kiln
import kiln.relay.analysis.mac_count  # noqa: F401 - registers FMacCount of the ops in its table
import kiln.relay.backend.interpreter  # noqa: F401 - registers FNumpyEval of table-driven ops
import kiln.relay.op.strategy  # noqa: F401 - registers strategies
import kiln.relay.qnn.interp  # noqa: F401 - registers the QNN ops' reference rules
from kiln.ir.op import Op
from kiln.relay.op import OpPattern
from kiln.relay.op.op import SCHEDULE_KINDS, define_op, register_compute, register_reference
from kiln.relay.op.strategy import registry
from kiln.relay.qnn.canonicalize import QNN_LOWERINGS
from kiln.runtime.error import OpNotImplemented

# Ops that never reach the TE compiler, and why.
_BEFORE_LOWERING = "an annotation: passes consume it before lowering"
_VM_INTERNAL = "a VM/memory intrinsic: the VM compiler emits it as an instruction"
NO_KERNEL = {
    "annotation.bitpack_end": _BEFORE_LOWERING,
    "annotation.bitpack_start": _BEFORE_LOWERING,
    "annotation.cast_hint": _BEFORE_LOWERING,
    "annotation.checkpoint": _BEFORE_LOWERING,
    "annotation.compiler_begin": _BEFORE_LOWERING,
    "annotation.compiler_end": _BEFORE_LOWERING,
    "annotation.stop_fusion": _BEFORE_LOWERING,
    "on_device": _BEFORE_LOWERING,
    "device_copy": "the executors copy between devices; FuseOps keeps it out of groups",
    "debug": "the interpreter runs the Python callback; never compiled",
    "call_lowered": "the call of an already lowered function (executor codegen)",
    "memory.alloc_storage": _VM_INTERNAL,
    "memory.alloc_tensor": _VM_INTERNAL,
    "memory.kill": _VM_INTERNAL,
    "vm.invoke_tvm_op": _VM_INTERNAL,
    "vm.reshape_tensor": _VM_INTERNAL,
    "vm.shape_of": _VM_INTERNAL,
}
# Ops with no NumPy rule, and why (the interpreter evaluates everything else through one).
NO_REFERENCE = {
    "call_lowered": "exists only after lowering; the interpreter runs Relay before it",
    "memory.alloc_storage": _VM_INTERNAL,
    "memory.alloc_tensor": _VM_INTERNAL,
    "memory.kill": _VM_INTERNAL,
    "vm.invoke_tvm_op": _VM_INTERNAL,
    "vm.reshape_tensor": _VM_INTERNAL,
    "vm.shape_of": _VM_INTERNAL,
}
_STATIC_LAYOUT = "produced by AlterOpLayout, which rewrites only calls with static shapes"
# Ops the VM would need a shape function for (pattern above BROADCAST, or dyn.*) without one.
NO_SHAPE_FUNC = {
    **{name: reason for name, reason in NO_KERNEL.items()},
    "nn.contrib_conv2d_gemm_weight_transform": _STATIC_LAYOUT,
    "nn.contrib_conv2d_gemm_without_weight_transform": _STATIC_LAYOUT,
    "nn.contrib_conv2d_winograd_weight_transform": _STATIC_LAYOUT,
    "nn.contrib_conv2d_winograd_without_weight_transform": _STATIC_LAYOUT,
}


def _all_ops() -> list[str]:
    return [name for name in Op.list_op_names() if not name.startswith("test.")]


def _lowered_away(op: Op) -> bool:
    """Rewritten into other ops before lowering (QNN canonicalization, Legalize)."""
    return op.name in QNN_LOWERINGS or op.has_attr("FTVMLegalize")


def _has_kernel(op: Op) -> bool:
    has_generic = op.has_attr("FTVMCompute") and op.has_attr("FTVMSchedule")
    return op.has_attr("FTVMStrategy") or has_generic


def test_every_op_has_a_type_relation_and_pattern():
    bad = [name for name in _all_ops()
           if not callable(Op.get(name).get_attr("FTVMTypeRelation"))
           or Op.get(name).get_attr("TOpPattern") not in {int(p) for p in OpPattern}]
    assert not bad, f"ops without a type relation or pattern kind: {bad}"


def test_every_op_that_is_lowered_has_a_kernel():
    bad = [name for name in _all_ops() if name not in NO_KERNEL
           and not _has_kernel(Op.get(name)) and not _lowered_away(Op.get(name))]
    assert not bad, f"ops with neither a strategy nor a compute + schedule: {bad}"


def test_every_compute_has_a_schedule_of_a_known_kind():
    bad = [name for name in _all_ops() if Op.get(name).has_attr("FTVMCompute")
           and Op.get(name).get_attr("FTVMSchedule") not in SCHEDULE_KINDS
           and not callable(Op.get(name).get_attr("FTVMSchedule"))]
    assert not bad, f"ops with a compute but no schedule: {bad}"


def test_every_op_has_a_reference_rule():
    bad = [name for name in _all_ops() if name not in NO_REFERENCE
           and not callable(Op.get(name).get_attr("FNumpyEval"))]
    assert not bad, f"ops the interpreter and FoldConstant cannot evaluate: {bad}"


def test_every_op_with_a_non_elementwise_shape_has_a_shape_function():
    # elementwise/broadcast outputs follow from the inputs' shapes; the rest need a rule
    bad = []
    for name in _all_ops():
        op = Op.get(name)
        needs = op.get_attr("TOpPattern") > OpPattern.BROADCAST or name.startswith("dyn.")
        if needs and name not in NO_SHAPE_FUNC and not _lowered_away(op) \
                and not callable(op.get_attr("FShapeFunc")):
            bad.append(name)
    assert not bad, f"ops the VM cannot run with Any dims (no FShapeFunc): {bad}"


def test_allow_lists_name_registered_ops_only():
    # a stale entry would hide a real gap once the name is reused
    names = set(_all_ops())
    for table in (NO_KERNEL, NO_REFERENCE, NO_SHAPE_FUNC):
        assert set(table) <= names, set(table) - names
        assert all(reason for reason in table.values())


def test_gradients_and_mac_counts_are_callables():
    for name in _all_ops():
        op = Op.get(name)
        for key in ("FPrimalGradient", "FMacCount", "FShapeFunc", "FNumpyEval"):
            assert op.get_attr(key) is None or callable(op.get_attr(key)), (name, key)


def test_an_op_registered_after_the_strategy_layer_gets_a_generic_strategy():
    from kiln import te
    from kiln.ir.type import TensorType
    from kiln.relay.op.op import register_opaque_schedule
    from kiln.relay.op.type_relations import identity_rel

    define_op("test.rules_late_double", identity_rel, OpPattern.ELEMWISE, 1)
    x = te.placeholder((3,), name="x")
    with pytest.raises(OpNotImplemented, match="test.rules_late_double"):
        registry.strategy_for("test.rules_late_double", None, [x], TensorType((3,)), "c")
    register_compute("test.rules_late_double",
                     lambda attrs, inputs, out_type: [te.compute((3,), lambda i: x[i] * 2)])
    register_opaque_schedule("test.rules_late_double")
    impl, outs = registry.select_implementation("test.rules_late_double", None, [x],
                                                TensorType((3,)), "c")
    assert impl.name == "rules_late_double.generic"
    assert registry.registered_keys("test.rules_late_double") == ["generic"]


def test_registering_a_rule_twice_fails_loudly():
    define_op("test.rules_twice", lambda *a: None, OpPattern.ELEMWISE, 1)
    register_reference("test.rules_twice", lambda attrs, args, out_type: args[0])
    with pytest.raises(kiln.TVMError, match="FNumpyEval of operator test.rules_twice"):
        register_reference("test.rules_twice", lambda attrs, args, out_type: args[0])


def test_shape_functions_of_shape_of_ndarray_size_and_gather_nd_on_the_vm():
    # the three ops the walk above found without a shape function
    import numpy as np

    from kiln import relay
    from kiln.runtime.vm import VirtualMachine

    x = relay.var("x", shape=(relay.Any(), 3), dtype="float32")
    i = relay.var("i", shape=(1, relay.Any()), dtype="int64")
    gathered = relay.gather_nd(x, i)
    out = relay.Tuple([relay.shape_of(x, "int64"), relay.ndarray_size(x, "int64"), gathered])
    exe = relay.vm.compile(kiln.IRModule.from_expr(relay.Function([x, i], out)), "c")
    xv = np.arange(15, dtype="float32").reshape(5, 3)
    iv = np.array([[4, 0, 2, 2]], dtype="int64")
    shape, size, rows = VirtualMachine(exe, kiln.cpu(0)).run(xv, iv)
    np.testing.assert_array_equal(shape.numpy(), [5, 3])
    assert int(size.numpy()) == 15
    np.testing.assert_array_equal(rows.numpy(), xv[iv[0]])


def test_declaring_the_ops_does_not_load_topi():
    # the family modules import TOPI inside their computes: building Relay stays cheap
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, kiln.relay.op; from kiln import relay; relay.nn.relu(relay.var('x')); "
            "print(sorted(m for m in sys.modules if m.startswith('kiln.topi')))")
    root = Path(kiln.__file__).parent.parent
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]", out


# ---- every rule lives in its op's family module (issue 13: one module per op family) ---------
_ROOT = Path(kiln.__file__).parent
# The registry and its registration helpers themselves.
_REGISTRY_API = ("kiln.ir.op", "kiln.relay.op.op")
# Modules that derive one rule for many ops from another rule (no per-op knowledge), and why.
_DERIVED = {
    "kiln.relay.qnn.interp": "a QNN op's reference is its canonical lowering, interpreted",
}
# Helpers the family modules share when they write rules (same_shape_as_input …).
_SHARED_HELPERS = ("kiln.relay.op.rule_util",)
_RULE_KEYS = ("FTVMCompute", "FNumpyEval", "FShapeFunc", "FPrimalGradient", "FMacCount",
              "FScaleAxisOutput", "FScaleAxisInput")
_REGISTER_HELPERS = {
    "define_op", "register_compute", "register_reference", "register_shape_func",
    "register_shape_requirement", "register_gradient", "register_mac_count",
    "register_fold_scale_axis", "register_scale_axis_role", "register_arg_types",
    "register_pattern", "register_type_rel", "register_injective_schedule",
    "register_broadcast_schedule", "register_reduce_schedule", "register_opaque_schedule"}
_ATTR_KEYS = {*_RULE_KEYS, "FTVMSchedule", "FTVMTypeRelation", "TOpPattern", "FInferArgTypes",
              "TShapeDataDependent", "TShapeValueRequirement", "TScaleAxisRole"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _registrations(tree: ast.AST):
    """``(line, helper)`` of each call that registers an op or one of its rules."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in ("set_attr", "register_op_attr"):
            key = node.args[0 if name == "set_attr" else 1] if len(node.args) > 1 else None
            if isinstance(key, ast.Constant) and key.value not in _ATTR_KEYS:
                continue
        elif name not in _REGISTER_HELPERS:
            continue
        yield node.lineno, name


@functools.lru_cache(maxsize=1)
def _registering_modules() -> dict[str, list[tuple[int, str]]]:
    """Each kiln module that registers ops or rules, with its registration calls."""
    found = {}
    for path in sorted(_ROOT.rglob("*.py")):
        text = path.read_text()
        if not any(word in text for word in (*_REGISTER_HELPERS, "set_attr", "register_op_attr")):
            continue  # parse only the files that could register something
        calls = list(_registrations(ast.parse(text, str(path))))
        if calls:
            found[_module_name(path)] = calls
    return found


def _family_modules() -> set[str]:
    """The op family modules: the modules that define ops (``define_op``)."""
    return {module for module, calls in _registering_modules().items()
            if any(name == "define_op" for _, name in calls)}


def test_rules_are_registered_only_where_ops_are_defined():
    # the old central tables (strategy/generic.py's COMPUTES, backend/numpy_ops.py,
    # vm/shape_rules.py, transform/gradient_rules.py …) are gone: a module that registers
    # rules but defines no op fails here with its file and line
    families = _family_modules()
    bad = [f"{module}:{line} {name}" for module, calls in _registering_modules().items()
           if module not in families and module not in _DERIVED
           and module not in _REGISTRY_API for line, name in calls]
    assert not bad, f"op rules registered outside the family modules: {bad}"
    assert {"kiln.relay.op.tensor", "kiln.relay.op.nn.dense", "kiln.relay.qnn.matmul"} <= \
        families


def test_every_rule_is_a_named_function_of_a_family_module():
    allowed = _family_modules() | set(_SHARED_HELPERS)
    bad = []
    for name in _all_ops():
        op = Op.get(name)
        for key in _RULE_KEYS:
            rule = op.get_attr(key)
            if rule is None:
                continue
            module = getattr(rule, "__module__", "")
            if module in _DERIVED:
                continue
            if module not in allowed:
                bad.append(f"{name}.{key} from {module}")
            elif getattr(rule, "__name__", "<lambda>") == "<lambda>":
                bad.append(f"{name}.{key} is a lambda in {module}")
    assert not bad, bad


def test_the_old_tables_are_gone():
    import importlib.util

    for module in ("kiln.relay.vm.shape_rules", "kiln.relay.transform.gradient_rules",
                   "kiln.relay.backend.numpy_nn"):
        assert importlib.util.find_spec(module) is None, module
    generic = ast.parse((_ROOT / "relay/op/strategy/generic.py").read_text())
    assert not [n for n in ast.walk(generic) if isinstance(n, ast.Lambda)]


def test_fold_scale_axis_names_no_op():
    # which op applies, commutes with or distributes a scale is its TScaleAxisRole
    tree = ast.parse((_ROOT / "relay/transform/fold_scale_axis.py").read_text())
    names = set(Op.list_op_names())
    named = sorted({n.value for n in ast.walk(tree)
                    if isinstance(n, ast.Constant) and n.value in names})
    assert not named, named
