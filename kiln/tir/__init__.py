"""kiln.tir: the loop-level IR (TVM's ``tvm.tir``).

Expressions (:mod:`kiln.tir.expr`), statements (:mod:`kiln.tir.stmt`), buffers
(:mod:`kiln.tir.buffer`), :class:`PrimFunc` (:mod:`kiln.tir.function`), arithmetic and
intrinsics (:mod:`kiln.tir.op`), visitors (:mod:`kiln.tir.stmt_functor`), the printer and
the passes (:mod:`kiln.tir.transform`). Names load on first use.
"""

from __future__ import annotations

from kiln._lazy import attach
from kiln.ir.hooks import register_hook

_EXPR = ("Any IntImm FloatImm Var SizeVar IterVar IterVarType StringImm Cast Add Sub Mul Div "
         "Mod FloorDiv FloorMod Min Max EQ NE LT LE GT GE And Or Not Select BufferLoad "
         "ProducerLoad Ramp Broadcast Let Call Shuffle Reduce CommReducer EqualOp NotEqualOp")
_STMT = ("Stmt LetStmt AttrStmt AssertStmt BufferStore BufferRealize Allocate DeclBuffer "
         "ForKind For While IfThenElse SeqStmt Evaluate Prefetch stmt_seq stmt_list")
_OP = ("INTRINSICS const convert_expr add subtract multiply divide floordiv floormod truncdiv "
       "truncmod indexdiv indexmod div negative left_shift right_shift bitwise_and bitwise_or "
       "bitwise_xor bitwise_not less less_equal greater greater_equal equal not_equal "
       "equal_op not_equal_op logical_and logical_or logical_not cast reinterpret min max abs "
       "if_then_else likely call_intrin call_extern call_pure_extern call_packed min_value "
       "max_value all any comm_reducer sum type_annotation ret isnan isinf isfinite power pow "
       "tvm_struct_get address_of exp exp2 exp10 log log2 log10 log1p expm1 tanh sigmoid erf "
       "sqrt rsqrt floor ceil round trunc nearbyint fabs sin cos tan asin acos atan sinh cosh "
       "asinh acosh atanh popcount clz atan2 fmod hypot copysign nextafter ldexp")
_FUNCTOR = ("StmtExprVisitor StmtExprMutator ExprVisitor ExprMutator post_order_visit "
            "pre_order_visit substitute ir_transform stmt_vars")

_LAZY: dict = {
    "expr": "kiln.tir.expr",
    "stmt": "kiln.tir.stmt",
    "op": "kiln.tir.op",
    "buffer": "kiln.tir.buffer",
    "function": "kiln.tir.function",
    "stmt_functor": "kiln.tir.stmt_functor",
    "printer": "kiln.tir.printer",
    "transform": "kiln.tir.transform",
    "ir_builder": "kiln.tir.ir_builder",
    "Range": ("kiln.ir.expr", "Range"),
    "Buffer": ("kiln.tir.buffer", "Buffer"),
    "decl_buffer": ("kiln.tir.buffer", "decl_buffer"),
    "PrimFunc": ("kiln.tir.function", "PrimFunc"),
    "script": ("kiln.tir.printer", "script"),
}
for _module, _names in (("kiln.tir.expr", _EXPR), ("kiln.tir.stmt", _STMT),
                        ("kiln.tir.op", _OP), ("kiln.tir.stmt_functor", _FUNCTOR)):
    _LAZY.update({name: (_module, name) for name in _names.split()})

__getattr__, __dir__ = attach(__name__, _LAZY)


def _prim_expr_ops():
    """The module of PrimExpr arithmetic (imported on first use: it is most of kiln.tir)."""
    from kiln.tir import op

    return op


register_hook("prim_expr_ops", _prim_expr_ops)
