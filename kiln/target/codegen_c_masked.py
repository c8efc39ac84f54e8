"""How CodeGenC lowers ``tir.if_then_else`` with a per-lane (vector) condition.

Entry point: :class:`CLaneMasks`, a mixin of :class:`~kiln.target.codegen_c.CodeGenC` whose
``call_if_then_else`` is the C rule for ``tir.if_then_else`` (the C twin of
:mod:`kiln.target.codegen_llvm_masked`).

TIR evaluates only the arm a lane takes, so an arm may hold a load that would fall outside its
buffer, or an integer division by zero, in the lanes that do not take it (a padded border). Each
arm first goes through :func:`~kiln.arith.load_bounds.speculable` (the proof the llvm target
uses too):

* both arms cannot fault: both are evaluated whole and blended on the condition's mask (plain
  vector loads and an and/or); a scalar condition keeps C's ``?:``, with provably in-bounds
  loads hoisted out of it (GCC PR 114375, see :meth:`CLaneMasks.call_if_then_else`);
* an arm whose only faulting parts are contiguous 32/64-bit loads that line up with its lanes
  reads them with ``kiln_maskload_<vector>`` (AVX2 ``maskload`` per 128/256-bit part: the
  untaken lanes' memory is never touched; a guarded loop without AVX2) and is blended too --
  the conv pad border stays straight-line vector code;
* any other arm that may fault (a gather, a division, a scalar load) is computed lane by lane
  in a loop over the lanes, only in the lanes taking it (:meth:`CLaneMasks._lane`).

A choice nested in an arm evaluated whole takes its masks and lane loop under the enclosing
arms' lanes too (``_enclosing_arms``).
"""

from __future__ import annotations

from typing import Any

from kiln.arith.load_bounds import OPERAND_FIELDS, PURE_CALLS, speculable
from kiln.runtime.dtype import DataType
from kiln.runtime.error import TVMError
from kiln.target.c_abi import c_type, is_const_int, node_name
from kiln.target.c_access import buffer_strides, flat_access

__all__ = ["CLaneMasks"]

_DIVISIONS = frozenset({"Div", "Mod", "FloorDiv", "FloorMod"})
# two-operand nodes (fields a, b), and the nodes whose lane k is computed from lane k of
# their (vector) operands
_BINARY_NODES = frozenset(kind for kind, fields in OPERAND_FIELDS.items()
                          if fields == ("a", "b")) | _DIVISIONS
_LANEWISE_NODES = _BINARY_NODES | {"Not", "Cast", "Select"}


class CLaneMasks:
    """``tir.if_then_else`` for :class:`~kiln.target.codegen_c.CodeGenC` (which provides
    ``expr``, ``_lane_mask``, ``_blend``, ``_vector_value``, ``_vector_type`` and the
    ``_vector_types`` declarations, ``_binary_scalar``, the name table and ``_analyzer``,
    holding the enclosing loops' ranges)."""

    # id(node) -> whether it may be evaluated unconditionally, for one outermost if_then_else
    # (the loop facts the proof uses do not change inside one expression)
    _speculation_memo: dict[int, bool] | None = None

    def call_if_then_else(self, node: Any) -> str:
        """``cond ? a : b``; a per-lane (vector) condition goes to
        :meth:`_vector_if_then_else`.

        A load under ``?:`` is conditional, so gcc's vectorizer makes it a masked load
        (``vmaskmovps``). GCC 12.2 picks the wrong mask for masked loads of interleaved
        groups (an outer loop vectorized over a fully unrolled small inner loop; GCC PR
        tree-optimization/114375), which silently broke scatter's "update" select. Loads
        that are provably in bounds need no mask: the C-family pipeline's
        ``tir.HoistSafeArmLoads`` binds them before the choice, so they become plain loads
        and a blend, which is both correct and faster.
        """
        outermost = self._speculation_memo is None
        if outermost:
            self._speculation_memo = {}
        try:
            cond = node.args[0]
            lanes = DataType(node.dtype).lanes
            if lanes > 1 and DataType(cond.dtype).lanes > 1:
                return self._vector_if_then_else(node)
            if lanes > 1 and self._enclosing_arms and not all(
                    self._speculable(arm) for arm in node.args[1:]):
                # inside an arm taken in some lanes only, the arm this condition picks may
                # fault in the others: choose per lane, under the enclosing arms' lanes
                from kiln import tir

                per_lane = tir.Broadcast(cond, lanes)
                return self._vector_if_then_else(
                    tir.Call(node.dtype, node.op, [per_lane, *node.args[1:]]))
            return self._scalar_if_then_else(node)
        finally:
            if outermost:
                self._speculation_memo = None

    def _scalar_if_then_else(self, node: Any) -> str:
        # arms that load and cannot fault were bound before the choice by
        # tir.transform.HoistSafeArmLoads; what is left may fault and stays under the ?:
        cond, then, other = (self.expr(a) for a in node.args)
        return f"({cond} ? {then} : {other})"

    def _speculable(self, expr: Any) -> bool:
        """Whether ``expr`` cannot fault (:func:`~kiln.arith.load_bounds.speculable` under
        the enclosing loops' ranges), so it may be evaluated where TIR says it is not."""
        memo = self._speculation_memo if self._speculation_memo is not None else {}
        return speculable(expr, self._analyzer, memo)

    # (condition, taken) of the enclosing vector if_then_else arms being evaluated whole: a
    # nested choice's arms may only fault in lanes all of them take
    _enclosing_arms: tuple[tuple[Any, bool], ...] = ()

    def _vector_if_then_else(self, node: Any) -> str:
        """A vector ``if_then_else`` with a per-lane condition.

        Arms that cannot fault are evaluated whole and blended on the condition's mask (plain
        vector loads and an and/or, no branch). An arm whose only
        faulting parts are contiguous 32/64-bit loads lining up with its lanes reads them
        with masked loads (``vmaskmovps``/``vpmaskmovd`` on AVX2: untaken lanes touch no
        memory) and is then blended too: the padded border of a conv. Any other arm that may
        fault -- a gather, an integer division by a lane that may be 0 -- is evaluated lane
        by lane in a loop over the lanes, only in the lanes taking it (:meth:`_lane`).
        Inside an arm of an enclosing choice, "taken" means taken by every enclosing one.
        """
        cond, then, other = node.args
        t = DataType(node.dtype)
        if DataType(cond.dtype).lanes != t.lanes:
            raise TVMError(f"C codegen ({self._func_name}): if_then_else condition has "
                           f"{DataType(cond.dtype).lanes} lanes but its arms have {t.lanes}; "
                           "broadcast the arms or the condition to one lane count")
        bits = max(t.bits, 8)
        # (When neither arm can fault, tir.transform.SelectSafeIfThenElse has already made the
        # choice a Select, unless an arm nests a choice that may; _whole_arm blends those.)
        vtype, lanes = self._vector_type(t), t.lanes
        mask_type = self._vector_type(DataType(f"int{bits}").with_lanes(lanes))
        decls = [f"{mask_type} _mv = {self._lane_mask(cond, bits)};"]
        whole = [self._whole_arm(then, cond, True, decls, bits),
                 self._whole_arm(other, cond, False, decls, bits)]
        if None not in whole:
            return f"({{ {' '.join(decls)} {self._blend(t, '_mv', *whole)}; }})"
        # vector values go through plain arrays: gcc vectorizes the lane loop over arrays
        element = c_type(DataType("int8") if t.is_bool else t.element_of)
        decls.append(f"int{bits}_t _m[{lanes}]; __builtin_memcpy(_m, &_mv, sizeof _m);")
        choose = "_m[_l]"
        if self._enclosing_arms:  # lanes no enclosing arm takes compute nothing
            decls.append(f"{mask_type} _av = {self._enclosing_mask(bits)}; int{bits}_t "
                         f"_a[{lanes}]; __builtin_memcpy(_a, &_av, sizeof _a);")
            choose = "!_a[_l] ? 0 : _m[_l]"
        picks = []
        for tag, arm, text in (("t", then, whole[0]), ("e", other, whole[1])):
            if text is None:
                picks.append(self._lane(arm, "_l"))
                continue
            decls.append(f"{vtype} _{tag}v = {text}; {element} _{tag}[{lanes}]; "
                         f"__builtin_memcpy(_{tag}, &_{tag}v, sizeof _{tag});")
            picks.append(f"_{tag}[_l]")
        return (f"({{ {' '.join(decls)} {element} _o[{lanes}]; "
                f"for (int _l = 0; _l < {lanes}; ++_l) _o[_l] = {choose} ? {picks[0]} : "
                f"{picks[1]}; {vtype} _r; __builtin_memcpy(&_r, _o, sizeof _r); _r; }})")

    def _inside_arm(self, arm: Any, cond: Any, taken: bool, emit) -> str:
        """``emit(arm)`` with ``(cond, taken)`` added to the enclosing arms."""
        outer = self._enclosing_arms
        self._enclosing_arms = (*outer, (cond, taken))
        try:
            return emit(arm)
        finally:
            self._enclosing_arms = outer

    def _enclosing_mask(self, bits: int, *arms: tuple[Any, bool]) -> str:
        """An ``int<bits>`` lane mask: all ones in the lanes every enclosing arm takes (and
        every one of ``arms``, more ``(condition, taken)`` pairs)."""
        masks = []
        for cond, taken in (*self._enclosing_arms, *arms):
            mask = self._lane_mask(cond, bits)
            masks.append(mask if taken else f"(~{mask})")
        return " & ".join(masks)

    def _whole_arm(self, arm: Any, cond: Any, taken: bool, decls: list[str],
                   mask_bits: int) -> str | None:
        """C text of ``arm`` as a whole vector, safe in every lane: as it is when it cannot
        fault, else with its loads that may fault read by masked loads of the lanes taking
        it (declared into ``decls``, after ``_mv``: the condition as ``mask_bits``-bit
        lanes); None when other parts may fault."""
        from kiln import tir
        from kiln.tir.stmt_functor import ir_transform

        if self._speculable(arm):
            return self._inside_arm(arm, cond, taken, self._vector_value)
        loads = [load for load in _lanewise_loads(arm)
                 if self._maskable(load) and not self._speculable(load)]
        if not loads:
            return None
        masked = {id(load): tir.Var("masked", load.dtype) for load in loads}
        rest = ir_transform(arm, lambda n: masked.get(id(n)), None)
        if not speculable(rest, self._analyzer, {}):
            return None
        for load in loads:
            load_type = DataType(load.dtype)
            if load_type.bits == mask_bits and not self._enclosing_arms:
                mask = "_mv" if taken else "(~_mv)"
            else:
                mask = self._enclosing_mask(load_type.bits, (cond, taken))
            access = flat_access(self, load.buffer, load.indices)
            decls.append(f"{self._vector_type(load_type)} {self._bind(masked[id(load)])} = "
                         f"{self._masked_load_helper(load_type)}({self._data(load.buffer)} + "
                         f"{access.base}, {mask});")
        return self._inside_arm(rest, cond, taken, self._vector_value)

    def _maskable(self, load: Any) -> bool:
        """Whether a vector load can be a masked load: contiguous lanes of 32/64-bit numbers
        filling whole 128-bit registers, from a buffer in memory (not a local vector array)."""
        t = DataType(load.dtype)
        if t.lanes == 1 or t.bits not in (32, 64) or t.is_bool or t.is_handle \
                or (t.bits * t.lanes) % 128 or id(load.buffer.data) in self._vector_locals:
            return False
        return flat_access(self, load.buffer, load.indices).contiguous

    def _masked_load_helper(self, dtype: DataType) -> str:
        """Declare (once, beside the vector typedefs) and name ``kiln_maskload_<vector>``:
        the lanes of ``p`` where ``mask`` is all ones, zero elsewhere, reading no memory of
        the other lanes (AVX2 ``maskload`` per 128/256-bit part; a guarded loop without
        AVX2)."""
        vtype = self._vector_type(dtype)
        name = f"kiln_maskload_{vtype}"
        if name in self._vector_types:
            return name
        total = dtype.bits * dtype.lanes
        width = 256 if total % 256 == 0 else 128
        per_part = width // dtype.bits
        element = c_type(dtype.element_of)
        mask_type = self._vector_type(DataType(f"int{dtype.bits}").with_lanes(dtype.lanes))
        kind = "p" + ("s" if dtype.bits == 32 else "d") if dtype.is_float \
            else f"epi{dtype.bits}"
        prefix = "_mm256" if width == 256 else "_mm"
        pointer = {"ps": "const float*", "pd": "const double*", "epi32": "const int*",
                   "epi64": "const long long*"}[kind]
        int_reg, reg = ("__m256i", "__m256") if width == 256 else ("__m128i", "__m128")
        reg += {"ps": "", "pd": "d"}.get(kind, "i")
        parts = "\n".join(
            f"  {{ {int_reg} m_{k}; {reg} r_{k}; __builtin_memcpy(&m_{k}, (char*)&mask + "
            f"{k * width // 8}, {width // 8}); r_{k} = {prefix}_maskload_{kind}(({pointer})"
            f"(p + {k * per_part}), m_{k}); __builtin_memcpy((char*)&r + {k * width // 8}, "
            f"&r_{k}, {width // 8}); }}"
            for k in range(total // width))
        self._vector_types[name] = (
            "#if defined(__AVX2__)\n#include <immintrin.h>\n#endif\n"
            f"static inline {vtype} {name}(const {element}* p, {mask_type} mask) {{\n"
            f"  {vtype} r = {{0}};\n#if defined(__AVX2__)\n{parts}\n#else\n"
            f"  for (int l = 0; l < {dtype.lanes}; ++l) if (mask[l]) r[l] = p[l];\n"
            "#endif\n  return r;\n}")
        return name

    # -- one lane of a vector expression ----------------------------------------------------
    # id(vector Let var) -> the C name of its one lane, inside a lane-by-lane arm
    _lane_names: dict[int, str] = {}

    def _lane(self, node: Any, lane: str) -> str:
        """C text of lane ``lane`` (a C int expression) of ``node``, computing only that lane:
        a load reads one element, a division divides one pair, a nested ``if_then_else`` is
        a scalar ``?:`` (its untaken arm is not evaluated). A scalar ``node`` is its own
        value. Nodes with no lane rule (an extern call) are evaluated whole, and indexed."""
        if DataType(node.dtype).lanes == 1:
            return self.expr(node)
        kind = node_name(node)
        if kind in _BINARY_NODES:
            return self._lane_binary(node, kind, lane)
        rule = getattr(self, f"_lane_{kind}", None)
        if rule is not None:
            text = rule(node, lane)
            if text is not None:
                return text
        return (f"({{ {self._vector_type(DataType(node.dtype))} _w = "
                f"{self._vector_value(node)}; _w[{lane}]; }})")

    def _lane_binary(self, node: Any, kind: str, lane: str) -> str:
        a_type = DataType(node.a.dtype).element_of
        a, b = self._lane(node.a, lane), self._lane(node.b, lane)
        rule = self._binary_scalar(kind, a_type, "_x", "_y")
        if rule.count("_x") == 1 and rule.count("_y") == 1:
            return self._binary_scalar(kind, a_type, a, b)
        # min/max name an operand twice: evaluate each once
        ctype = c_type(a_type)
        return f"({{ {ctype} _x = {a}; {ctype} _y = {b}; {rule}; }})"

    def _lane_Var(self, node: Any, lane: str) -> str:
        if id(node) in self._lane_names:
            return self._lane_names[id(node)]
        return f"{self._var_name(node)}[{lane}]"

    def _lane_Ramp(self, node: Any, lane: str) -> str:
        return f"({self.expr(node.base)} + ({lane}) * {self.expr(node.stride)})"

    def _lane_Broadcast(self, node: Any, lane: str) -> str:
        return self.expr(node.value)

    def _lane_Not(self, node: Any, lane: str) -> str:
        return f"(!{self._lane(node.a, lane)})"

    def _lane_Cast(self, node: Any, lane: str) -> str:
        value = self._lane(node.value, lane)
        target = DataType(node.dtype)
        if target.is_bool:
            return f"({value} != 0)"
        return f"(({c_type(target.element_of)}){value})"

    def _lane_Select(self, node: Any, lane: str) -> str:
        cond, then, other = (self._lane(x, lane) for x in
                             (node.condition, node.true_value, node.false_value))
        return f"({cond} ? {then} : {other})"

    def _lane_Let(self, node: Any, lane: str) -> str:
        value_type = DataType(node.var.dtype)
        value = self._lane(node.value, lane)
        name = self._fresh(node.var.name)
        if value_type.lanes > 1:
            self._lane_names = {**self._lane_names, id(node.var): name}
        else:
            self._names[id(node.var)] = name
        try:
            body = self._lane(node.body, lane)
        finally:
            self._lane_names = {k: v for k, v in self._lane_names.items()
                                if k != id(node.var)}
        element = c_type(DataType("int8") if value_type.is_bool else value_type.element_of)
        return f"({{ {element} {name} = {value}; {body}; }})"

    def _lane_Shuffle(self, node: Any, lane: str) -> str:
        """Output lane ``k`` is lane ``m`` of one source vector: a chain of ``?:`` on the
        lane number evaluates only the source lane picked."""
        sources = []
        for vector in node.vectors:
            count = DataType(vector.dtype).lanes
            sources.extend((vector, str(m)) for m in range(count))
        picks = [sources[int(i.value)] for i in node.indices]
        text = self._lane(*picks[-1])
        for k in range(len(picks) - 2, -1, -1):
            text = f"(({lane}) == {k} ? {self._lane(*picks[k])} : {text})"
        return text

    def _lane_Call(self, node: Any, lane: str) -> str | None:
        """A pure lane-wise call on one lane: the same call on scalar arguments."""
        from kiln import tir

        if node.op == "tir.if_then_else":
            cond, then, other = (self._lane(a, lane) for a in node.args)
            return f"({cond} ? {then} : {other})"
        if node.op not in PURE_CALLS:
            return None  # an extern call computes whole vectors: evaluated whole
        decls, params = [], []
        for arg in node.args:
            arg_type = DataType(arg.dtype).element_of
            param = tir.Var("lane_arg", str(arg_type))
            name = self._bind(param)
            ctype = c_type(DataType("int8") if arg_type.is_bool else arg_type)
            decls.append(f"{ctype} {name} = {self._lane(arg, lane)};")
            params.append(param)
        scalar_call = tir.Call(str(DataType(node.dtype).element_of), node.op, params)
        return f"({{ {' '.join(decls)} {self.expr(scalar_call)}; }})"

    def _lane_BufferLoad(self, node: Any, lane: str) -> str | None:
        """One element: contiguous lanes are ``base + lane``; other vector indices are
        computed for the one lane."""
        buffer = node.buffer
        if id(buffer.data) in self._vector_locals:
            return None  # a local array of vectors: in bounds by construction, read whole
        data = self._data(buffer)
        access = flat_access(self, buffer, node.indices)
        if access.contiguous:
            return f"{data}[({access.base}) + {lane}]"
        indices = list(node.indices)
        strides = buffer_strides(self, buffer) if len(indices) > 1 or buffer.strides else ["1"]
        terms = []
        for index, stride in zip(indices, strides):
            text = self._lane(index, lane)
            terms.append(text if stride == "1" else f"{text} * {stride}")
        offset = buffer.elem_offset
        if offset is not None and not is_const_int(offset, 0):
            terms.append(self.expr(offset))
        return f"{data}[{' + '.join(terms)}]"


def _lanewise_loads(expr: Any) -> list[Any]:
    """The distinct vector BufferLoads whose lane k only lane k of ``expr`` uses, reached
    through lane-wise nodes: not through a Shuffle or Let (lanes may move), an extern call,
    nor the arms of a nested ``if_then_else`` (which read only where it chooses them)."""
    loads: dict[int, Any] = {}
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if id(node) in seen or DataType(node.dtype).lanes == 1:
            continue
        seen.add(id(node))
        kind = node_name(node)
        if kind == "BufferLoad":
            loads[id(node)] = node
            stack.extend(node.indices)
        elif kind == "Call" and node.op == "tir.if_then_else":
            stack.append(node.args[0])
        elif kind == "Call" and node.op in PURE_CALLS:
            stack.extend(node.args)
        elif kind in _LANEWISE_NODES:
            stack.extend(getattr(node, f) for f in OPERAND_FIELDS.get(kind, ("a", "b")))
    return list(loads.values())
