"""Operator layout alteration (TVM's ``relay.transform.AlterOpLayout``).

Entry points: :func:`AlterOpLayout` (the pass) and :func:`alter_op_layout` (one expression).

An op may register ``FTVMAlterOpLayout(attrs, inputs, tinfos, out_type) -> expr | None`` to
trade itself, for the current target, for a faster form in another data layout: on x86 an
NCHW ``nn.conv2d`` becomes ``nn.contrib_conv2d_NCHWc`` (data ``NCHW16c``, kernel
``OIHW16i16o``), ``nn.dense`` becomes ``nn.contrib_dense_pack``. Ops say how they follow a
layout with ``FInferCorrectLayout`` (``kiln.relay.op.layout``): elementwise and broadcasting
ops, pools and concatenate keep working on blocked activations, so a chain of convs passes
``NCHW16c`` tensors from one to the next and a ``layout_transform`` appears only where a
consumer needs the original layout (an op without the rule, the function's result).

The rewrite walks each call after its arguments (TVM's LayoutRewriter): every value it
produces carries its original layout and the layout it now has. A call's rule, asked once
with the original layouts and once with the current ones, names the layouts it needs its
inputs in; the pass inserts the ``layout_transform`` from where each input is (for an input
the rule's original answer gives the source layout of, or the primal axes of the wanted one)
and records the output's layouts. An argument the alter function built itself (an
already-transformed weight) is left as it is. Layout transforms of constants are folded by
the FoldConstant that follows, so packed weights cost nothing at run time. Runs at opt
level 3, inside the target's scope (``with target:``), as ``relay.build`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kiln.relay.expr import Call, Function, Tuple
from kiln.relay.expr_functor import ExprMutator, ExprVisitor
from kiln.relay.op.layout import primal_layout
from kiln.relay.op.op import OpPattern
from kiln.relay.op.transform import layout_transform
from kiln.relay.transform.pass_util import is_op_call, op_pattern, relay_function_pass, type_of
from kiln.runtime.error import TVMError

__all__ = ["AlterOpLayout", "alter_op_layout", "ConvertLayout", "convert_layout"]

_UNTRACKED = ("", "")


class _LayoutRewriter(ExprMutator):
    """``visit`` answers every expression in its original layout; ``_visit_layout`` answers
    a call as ``(value, original layout, current layout)`` for a consumer that may take it
    as it is."""

    def __init__(self, uses: dict[Any, int], alter_of: Callable[[Any], Any]) -> None:
        super().__init__()
        self._uses = uses
        self._alter_of = alter_of
        self._layout_memo: dict[Any, tuple[Any, str, str]] = {}
        self._transforms: dict[tuple[int, str, str], Any] = {}
        # id(rewritten call) -> (original call, its inputs as (value, orig, cur), the call)
        self._made: dict[int, tuple[Any, list, Any]] = {}

    def visit_function(self, node: Function) -> Any:
        return node if node.get_attr("Primitive") else super().visit_function(node)

    def visit_call(self, node: Call) -> Any:
        if not is_op_call(node):  # a call of a function or closure
            return super().visit_call(node)
        value, orig, cur = self._visit_layout(node)
        return self._restore(value, orig, cur)

    # ---- layouts of values ----------------------------------------------------------------
    def _visit_layout(self, node: Any) -> tuple[Any, str, str]:
        if not is_op_call(node):
            return (self.visit(node), *_UNTRACKED)
        found = self._layout_memo.get(node)
        if found is None:
            found = self._layout_memo[node] = self._rewrite(node)
        return found

    def _transform(self, value: Any, src: str, dst: str) -> Any:
        """``value`` from layout ``src`` to ``dst``, one node per (value, src, dst); undoing
        a transform returns its input."""
        if src == dst:
            return value
        if is_op_call(value, "layout_transform") and value.attrs.src_layout == dst and \
                value.attrs.dst_layout == src:
            return value.args[0]
        key = (id(value), src, dst)
        if key not in self._transforms:
            self._transforms[key] = (layout_transform(value, src, dst), value)
        return self._transforms[key][0]

    def _restore(self, value: Any, orig: str, cur: str) -> Any:
        if not cur:
            return value
        key = (id(value), cur, orig)
        if key not in self._transforms:
            # only a channel-blocked result (NCHW16c) is worth unpacking in its own kernel
            blocked = any(letter.islower() for letter in cur)
            unblocked = self._unblocked(value, orig) if blocked else None
            if unblocked is not None:
                self._transforms[key] = (unblocked, value)
        return self._transform(value, cur, orig)

    def _unblocked(self, value: Any, orig: str) -> Any:
        """``value`` computed in layout ``orig`` instead, when it is a blocked conv that only
        this consumer reads, behind single-use elementwise/broadcast ops: the conv unpacks
        its result in its own kernel (``out_layout``) rather than a separate transform."""
        made = self._made.get(id(value))
        if made is None or self._uses.get(made[0], 0) != 1:
            return None
        node, entries, call = made
        if op_pattern(call.op) == OpPattern.OUT_ELEMWISE_FUSABLE and \
                "kernel_layout" in call.attrs and orig == "NCHW":
            from kiln.relay.op.layout import attrs_with

            return Call(call.op, call.args, attrs_with(call.attrs, out_layout=orig),
                        call.type_args, call.span)
        if op_pattern(call.op) > OpPattern.BROADCAST or len(entries) != len(call.args):
            return None
        args, found = [], False
        for value_i, orig_i, cur_i in entries:
            inner = None if found or not cur_i else self._unblocked(value_i, orig_i)
            found = found or inner is not None
            args.append(inner if inner is not None else self._restore(value_i, orig_i, cur_i))
        return Call(call.op, args, node.attrs, call.type_args, call.span) if found else None

    def _to_layout(self, value: Any, orig: str, cur: str, wanted: str, source: str,
                   op_name: str) -> Any:
        """An input (now in ``cur``, originally ``orig``; "" untracked, then ``source`` is its
        layout if known) in the layout ``wanted`` ("" the original)."""
        if not wanted:
            return self._restore(value, orig, cur)
        if cur and set(primal_layout(cur)) == set(primal_layout(wanted)):
            return self._transform(value, cur, wanted)
        value = self._restore(value, orig, cur)
        source = orig or source or primal_layout(wanted)
        if set(primal_layout(source)) != set(primal_layout(wanted)):
            raise TVMError(f"AlterOpLayout: {op_name} wants an input in layout {wanted!r}, "
                           f"which {source!r} does not transform to")
        return self._transform(value, source, wanted)

    # ---- one call -------------------------------------------------------------------------
    def _rewrite(self, node: Call) -> tuple[Any, str, str]:
        op = node.op
        fields = [list(a.fields) if isinstance(a, Tuple) else [a] for a in node.args]
        entries = [[self._visit_layout(f) for f in group] for group in fields]
        restored = [self._rebuild(arg, [self._restore(*e) for e in group])
                    for arg, group in zip(node.args, entries)]
        types = [type_of(f) for group in fields for f in group]
        old_in = [orig for group in entries for _, orig, _ in group]
        new_call = Call(op, restored, node.attrs, node.type_args, node.span)
        alter = self._alter_of(op)
        if alter is not None:
            tinfos, out_type = [type_of(a) for a in node.args], type_of(node)
            if out_type is None or any(t is None for t in tinfos):
                raise TVMError(f"AlterOpLayout needs the types of {op.name}; run InferType "
                               "first")
            new_call = alter(node.attrs, restored, tinfos, out_type) or new_call
        rule = new_call.op.get_attr("FInferCorrectLayout") if is_op_call(new_call) else None
        if rule is None:
            return (new_call, *_UNTRACKED)
        old_rule = op.get_attr("FInferCorrectLayout")
        old = old_rule(node.attrs, old_in, old_in, types) if old_rule is not None else None
        # positions whose argument the alter function passed through are the pass's to convert
        ours = [j < len(restored) and arg is restored[j] for j, arg in enumerate(new_call.args)]
        new_in, flat_old = [], []
        for j, mine in enumerate(ours):
            for _, orig, cur in entries[j] if mine else [(None, "", "")]:
                new_in.append(cur or orig)
                flat_old.append(orig)
        if not all(ours) or len(new_in) != len(types):
            types = [type_of(a) for a in new_call.args]
        out = rule(new_call.attrs, new_in, flat_old, types)
        args, k = [], 0
        for j, arg in enumerate(new_call.args):
            if not ours[j]:
                args.append(arg)
                k += 1
                continue
            converted = []
            for value, orig, cur in entries[j]:
                source = old.input_layouts[k] if old is not None else ""
                converted.append(self._to_layout(value, orig, cur, out.input_layouts[k],
                                                 source, new_call.op.name))
                k += 1
            args.append(self._rebuild(node.args[j], converted))
        attrs = out.new_attrs if out.new_attrs is not None else new_call.attrs
        value = Call(new_call.op, args, attrs, new_call.type_args, node.span)
        if all(ours) and not any(isinstance(a, Tuple) for a in node.args):
            self._made[id(value)] = (node, [e for group in entries for e in group], value)
        orig_out = old.output_layouts[0] if old is not None and old.output_layouts else ""
        cur_out = out.output_layouts[0] if out.output_layouts else ""
        if orig_out and cur_out and orig_out != cur_out:
            return value, orig_out, cur_out
        return (value, *_UNTRACKED)

    @staticmethod
    def _rebuild(arg: Any, values: list[Any]) -> Any:
        if not isinstance(arg, Tuple):
            return values[0]
        if all(v is f for v, f in zip(values, arg.fields)):
            return arg
        return Tuple(values, arg.span)


def alter_op_layout(expr: Any) -> Any:
    """Apply every op's ``FTVMAlterOpLayout`` in a type-checked expression, with the layout
    transforms its neighbours need."""
    import kiln.relay.op.strategy  # noqa: F401  (the strategies register the alterations)

    return _rewrite_layouts(expr, lambda op: op.get_attr("FTVMAlterOpLayout"))


def convert_layout(expr: Any, desired_layouts: Mapping[str, Sequence[str]]) -> Any:
    """Give the ops named in ``desired_layouts`` their desired layouts (each op's
    ``FTVMConvertOpLayout``), with the layout transforms their neighbours need."""
    import kiln.relay.op.nn  # noqa: F401  (the op families register the conversions)
    from kiln.ir.op import Op

    for name, layouts in desired_layouts.items():
        if Op.get(name).get_attr("FTVMConvertOpLayout") is None:
            raise TVMError(f"ConvertLayout: {name} has no FTVMConvertOpLayout, so it cannot "
                           f"take the layouts {list(layouts)}")

    def convert_of(op: Any) -> Any:
        layouts = desired_layouts.get(op.name)
        convert = op.get_attr("FTVMConvertOpLayout") if layouts is not None else None
        if convert is None:
            return None
        return lambda attrs, inputs, tinfos, out_type: convert(attrs, inputs, tinfos,
                                                               [str(x) for x in layouts])

    return _rewrite_layouts(expr, convert_of)


def _rewrite_layouts(expr: Any, alter_of: Callable[[Any], Any]) -> Any:
    counter = _UseCounter()
    counter.visit(expr)
    return _LayoutRewriter(counter.uses, alter_of).visit(expr)


class _UseCounter(ExprVisitor):
    """How many times each expression is referenced (by a parent or as the body)."""

    def __init__(self) -> None:
        super().__init__()
        self.uses: dict[Any, int] = {}

    def visit(self, expr: Any) -> Any:
        self.uses[expr] = self.uses.get(expr, 0) + 1
        return super().visit(expr)


def AlterOpLayout():  # noqa: N802 (TVM's name)
    """The pass replacing ops by their target-preferred layout forms (opt level 3).

    Example
    -------
    >>> import numpy as np, kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(1, 16, 8, 8))
    >>> w = relay.const(np.ones((32, 16, 3, 3), "float32"))
    >>> v = relay.const(np.ones((16, 32, 1, 1), "float32"))
    >>> y = relay.nn.conv2d(relay.nn.relu(relay.nn.conv2d(x, w, padding=1)), v)
    >>> mod = kiln.IRModule.from_expr(relay.Function([x], y))
    >>> with kiln.target.Target("llvm"), kiln.transform.PassContext(opt_level=3):
    ...     second = AlterOpLayout()(mod)["main"].body
    >>> first = second.args[0].args[0]  # behind the relu, which runs on NCHW16c
    >>> second.op.name, second.attrs.data_layout, second.attrs.out_layout
    ('nn.contrib_conv2d_NCHWc', 'NCHW16c', 'NCHW')
    >>> first.attrs.data_layout, first.attrs.kernel_layout, first.attrs.out_layout
    ('NCHW', 'OIHW16o', 'NCHW16c')
    """

    def rewrite(func: Any, mod: Any, ctx: Any) -> Any:
        return alter_op_layout(func)

    return relay_function_pass("AlterOpLayout", 3, rewrite, required=("InferType",),
                               needs_types=True, skip_primitive=True)


def ConvertLayout(desired_layouts: Mapping[str, Sequence[str]]):  # noqa: N802 (TVM's name)
    """TVM's ``relay.transform.ConvertLayout``: rewrite the ops named in ``desired_layouts``
    (``{"nn.conv2d": ["NCHW", "default"]}``: data layout, kernel layout or ``"default"``)
    into those layouts; the ops between follow (``FInferCorrectLayout``) and the original
    layouts return only where a consumer needs them (opt level 3).

    Example
    -------
    >>> import kiln
    >>> from kiln import relay
    >>> x = relay.var("x", shape=(1, 8, 8, 3))
    >>> w = relay.var("w", shape=(3, 3, 3, 16))
    >>> y = relay.nn.relu(relay.nn.conv2d(x, w, padding=1, data_layout="NHWC",
    ...                                   kernel_layout="HWIO"))
    >>> mod = kiln.IRModule.from_expr(relay.Function([x, w], y))
    >>> with kiln.transform.PassContext(opt_level=3):
    ...     body = ConvertLayout({"nn.conv2d": ["NCHW", "default"]})(mod)["main"].body
    >>> body.op.name, body.attrs.dst_layout, body.args[0].args[0].attrs.data_layout
    ('layout_transform', 'NHWC', 'NCHW')
    """
    layouts = {str(k): list(v) for k, v in dict(desired_layouts).items()}

    def rewrite(func: Any, mod: Any, ctx: Any) -> Any:
        return convert_layout(func, layouts)

    return relay_function_pass("ConvertLayout", 3, rewrite, required=("InferType",),
                               needs_types=True, skip_primitive=True)
