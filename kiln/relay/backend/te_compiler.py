"""The TE compiler: lower each primitive (fused) Relay function to one TIR PrimFunc.

Entry points: :class:`TECompiler` (``lower(func, symbolic=False) -> LoweredFunc``,
``lower_shape_func(func) -> LoweredShapeFunc``, ``ir_module()``, ``build()``),
:func:`lower_primitive` and :class:`ComputeBuilder`.

For a function marked ``Primitive=1`` (made by FuseOps), the compiler creates a
``te.placeholder`` per tensor parameter (tuple parameters are flattened), walks the body and
asks each operator's strategy for a compute (:func:`~kiln.relay.op.strategy.
select_implementation`). The *anchor* is the op with the highest pattern kind; when it is a
complex op (reduction, conv, dense …) its implementation's schedule schedules the whole group
(TVM allows only one such op per group), otherwise the target's injective schedule does. The
schedule is lowered to a PrimFunc named ``tvmgen_<mod_name>_<fused name>``.

A function with ``Any`` dimensions (the VM's dynamic shapes) lowers with ``symbolic=True``:
its dynamic extents become shape variables bound from the buffers at run time, and its shape
function (:mod:`kiln.relay.backend.shape_func`) lowers to a second small kernel that computes
the output shapes. All three kinds of kernel share one cache per compiler, keyed by structural
hash, so identical groups share one kernel. Lowered kernels are also kept on disk
(:mod:`kiln.relay.backend.lowered_cache`, ``KILN_CACHE_DIR/lower``): a build of another model
with the same fused groups, or of the same model with other weights, lowers only what is new;
the LLVM object and C library caches then make a second build of the same model compile
nothing.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kiln.ir.module import IRModule
from kiln.ir.op import Op
from kiln.ir.structural import structural_equal, structural_hash
from kiln.ir.type import TensorType, TupleType
from kiln.relay import expr as rx
from kiln.relay.backend import lowered_cache, shape_func
from kiln.relay.backend.build_cache import compile_context_key
from kiln.relay.op.op import OpPattern
from kiln.runtime import native
from kiln.runtime.error import TVMError
from kiln.tir.transform.vectorize import any_vector_lanes

__all__ = ["TECompiler", "LoweredFunc", "LoweredShapeFunc", "ComputeBuilder",
           "lower_primitive", "is_reshape_only", "reshaped_field", "kernel_recursion_room"]

# ops that only change the shape: a group made only of them runs as a zero-copy view (__nop)
_RESHAPE_OPS = frozenset({"reshape", "squeeze", "expand_dims", "nn.batch_flatten",
                          "reshape_like", "contrib_reverse_reshape"})


@dataclass
class LoweredFunc:
    """A lowered primitive: its kernel name, PrimFunc, and hash attribute (16 hex digits)."""

    name: str
    prim_func: Any
    hash: str
    num_inputs: int
    num_outputs: int
    num_ops: int = 1


@dataclass
class LoweredShapeFunc:
    """The shape function of a primitive with ``Any`` dimensions.

    ``name`` is its kernel (None when every output shape is static and nothing needs
    checking), ``dynamic`` says per flat output whether its shape is computed, ``checked``
    whether the kernel ends with the run-time check that computed extents agree with the
    static ones (one more int64 ``[1]`` output), and ``inputs`` lists the flat input indexes
    it reads (shapes, or values for a data-dependent function).
    """

    name: str | None
    dynamic: list[bool]
    checked: bool
    inputs: list[int]
    by_value: bool


# Python frames one fused Relay op may need in the recursive TE/TIR walks below it: an op nests
# its TIR expression a few levels deep (sigmoid: 1 / (1 + exp(-x))), and each level costs the
# lowering passes, the arith simplifier and codegen a handful of frames.
_FRAMES_PER_FUSED_OP = 64


@contextlib.contextmanager
def kernel_recursion_room(num_ops: int) -> Iterator[None]:
    """Let the recursive TE/TIR walks of a kernel fused from ``num_ops`` ops run, then restore.

    A fused kernel's expressions nest at most as deep as its Relay calls, and FuseOps caps a
    group at ``relay.FuseOps.max_depth`` ops (256 by default), so the increase is bounded by
    the kernel: it is not a global lift of Python's recursion limit.
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(old + _FRAMES_PER_FUSED_OP * max(num_ops, 1))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _count_calls(func: rx.Function) -> int:
    from kiln.relay.expr_functor import post_order_visit

    calls = [0]

    def count(node: Any) -> None:
        if isinstance(node, rx.Call):
            calls[0] += 1

    post_order_visit(func.body, count)
    return calls[0]


def _flat_types(ty: Any) -> list[TensorType]:
    if isinstance(ty, TupleType):
        return [t for f in ty.fields for t in _flat_types(f)]
    if not isinstance(ty, TensorType):
        raise TVMError(f"a primitive function can only take and return tensors, got {ty!r}")
    return [ty]


def is_reshape_only(func: rx.Function) -> bool:
    """Whether a primitive function only reshapes its single input (TVM's reshape_only)."""
    source = _reshaped_source(func)
    return source is not None and source in func.params


def reshaped_field(func: rx.Function) -> int | None:
    """The field index when a primitive function only reshapes one tensor field of its
    single tuple parameter (a layer's output taken from a multi-output op), else None."""
    source = _reshaped_source(func)
    if not (isinstance(source, rx.TupleGetItem) and len(func.params) == 1
            and source.tuple_value is func.params[0]):
        return None
    fields = getattr(func.params[0].checked_type, "fields", None)
    if fields is None or not all(isinstance(f, TensorType) for f in fields):
        return None
    return source.index


def _reshaped_source(func: rx.Function) -> Any:
    """The expression a chain of reshape ops (the whole body) reads, or None."""
    calls = []
    node = func.body
    while isinstance(node, rx.Call) and isinstance(node.op, Op):
        calls.append(node.op.name)
        if len(node.args) != 1 and node.op.name != "reshape_like":
            return None
        node = node.args[0]
    return node if calls and all(c in _RESHAPE_OPS for c in calls) else None


class ComputeBuilder:
    """Builds the te compute of a primitive function body, remembering the anchor op.

    With ``symbolic=True`` the ``Any`` output dimensions of each call become shape variables
    (as TVM's lowering does), so each op's strategy sizes its compute from the output type;
    ``inner_dims`` (node id -> dims of its flat outputs, from the composed shape rules) gives
    the extents of calls that no output buffer binds.
    """

    def __init__(self, target: Any, symbolic: bool = False,
                 inner_dims: dict[int, list[list[Any]]] | None = None) -> None:
        self.target = target
        self.symbolic = symbolic
        self.inner_dims = inner_dims or {}
        self.memo: dict[int, list] = {}
        self.anchor: tuple[int, Any, Any, list] | None = None  # (pattern, impl, attrs, outs)

    def visit(self, node: Any) -> list:
        """The te tensors of ``node``'s flat outputs (each node is built once)."""
        key = id(node)
        if key in self.memo:
            return self.memo[key]
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            raise TVMError(f"cannot lower {type(node).__name__} inside a primitive function")
        result = method(node)
        self.memo[key] = result
        return result

    def visit_Constant(self, node: rx.Constant) -> list:  # noqa: N802 (node kind)
        from kiln import te

        array = node.data.numpy()
        if array.ndim != 0:
            raise TVMError("a non-scalar constant inside a primitive function; FuseOps must "
                           "pass it as a parameter")
        dtype = str(array.dtype)
        return [te.compute((), lambda: te.const(array.item(), dtype), name="compile_engine_const")]

    def visit_Tuple(self, node: rx.Tuple) -> list:  # noqa: N802 (node kind)
        return [t for f in node.fields for t in self.visit(f)]

    def visit_TupleGetItem(self, node: rx.TupleGetItem) -> list:  # noqa: N802 (node kind)
        fields = self.visit(node.tuple_value)
        sizes = [len(_flat_types(t)) for t in node.tuple_value.checked_type.fields]
        start = sum(sizes[: node.index])
        return fields[start: start + sizes[node.index]]

    def visit_Let(self, node: rx.Let) -> list:  # noqa: N802 (node kind)
        self.memo[id(node.var)] = self.visit(node.value)
        return self.visit(node.body)

    def visit_Call(self, node: rx.Call) -> list:  # noqa: N802 (node kind)
        from kiln.relay.op.strategy import select_implementation

        if not isinstance(node.op, Op):
            raise TVMError(f"a primitive function may only call operators, found {node.op!r}")
        inputs = [t for a in node.args for t in self.visit(a)]
        out_type = self._output_type(node)
        impl, outs = select_implementation(node.op, node.attrs, inputs, out_type, self.target)
        pattern = node.op.get_attr("TOpPattern")
        pattern = int(OpPattern.OPAQUE if pattern is None else pattern)
        if pattern >= OpPattern.COMM_REDUCE and self.anchor is not None \
                and self.anchor[0] >= OpPattern.COMM_REDUCE:
            raise TVMError("Cannot apply TOPI schedule to a primitive function with two "
                           f"complicated ops ({self.anchor[1].name} and {impl.name})")
        if self.anchor is None or pattern >= self.anchor[0]:
            self.anchor = (pattern, impl, node.attrs, outs)
        return outs

    def _output_type(self, node: rx.Call) -> Any:
        if not self.symbolic:
            return node.checked_type
        dims = self.inner_dims.get(id(node))
        if dims is None:
            return shape_func.symbolic_type(node.checked_type, f"out{len(self.memo)}")
        return shape_func.typed_like(node.checked_type, iter(dims))


def _placeholders(func: rx.Function, builder: ComputeBuilder) -> list:
    """One te.placeholder per flat tensor parameter (``Any`` dims of a symbolic lowering
    become int64 variables; a static lowering refuses them)."""
    from kiln import te

    inputs: list = []
    for param in func.params:
        types = _flat_types(param.checked_type)
        # a tuple parameter flattens to one placeholder per field, each with its own name
        names = [param.name_hint] if len(types) == 1 else [
            f"{param.name_hint}_{i}" for i in range(len(types))]
        tensors = []
        for ty, name in zip(types, names):
            if builder.symbolic:
                shape = tuple(
                    int(d.value) if isinstance(getattr(d, "value", None), int)
                    else te.var(f"{param.name_hint}_n{k}_{len(inputs) + len(tensors)}", "int64")
                    for k, d in enumerate(ty.shape))
            else:
                shape = tuple(ty.concrete_shape)
            tensors.append(te.placeholder(shape, str(ty.dtype), name=name))
        builder.memo[id(param)] = tensors
        inputs.extend(tensors)
    return inputs


def _bindable(tensor: Any, ty: TensorType, index: int, inputs: list) -> Any:
    """An output whose buffer the kernel's arguments can bind: a copy when the tensor is an
    input (an identity group needs its own output buffer), or when its extents are
    expressions of inner extents: then the copy has fresh variables, bound from the buffer the
    VM allocated with the shape function's extents."""
    from kiln import te, tir

    if any(tensor is i for i in inputs):
        return te.compute(tensor.shape, lambda *i: tensor(*i), name="copy")
    if all(isinstance(d, int | tir.IntImm | tir.Var) for d in tensor.shape):
        return tensor
    return te.compute(shape_func.symbolic_shape(ty, f"result{index}"), lambda *i: tensor(*i),
                      name="T_output", tag="injective")


def _schedule(anchor: Any, outputs: list, target: Any, symbolic: bool) -> Any:
    """The anchor op's schedule when it is a complex op, else the target's injective one.

    A schedule tuned for constant shapes (packed GEMM tiles …) may reject symbolic ones (a
    TVMError, or the ValueError of a symbolic extent used as a Python bool): a symbolic
    kernel then gets the plain loop nest. A static kernel's schedule error is a real error.
    """
    from kiln import te
    from kiln.relay.op.strategy import target_schedule

    try:
        if anchor is not None and anchor[0] >= OpPattern.COMM_REDUCE:
            _, impl, attrs, _ = anchor
            return impl.schedule(attrs, outputs, target)
        return target_schedule("injective", outputs, target)
    except (TVMError, ValueError):
        if not symbolic:
            raise
        return te.create_schedule([o.op for o in outputs])


def lower_primitive(func: rx.Function, target: Any, name: str,
                    symbolic: bool = False) -> tuple[Any, int, int]:
    """Lower one primitive Relay function to a PrimFunc named ``name``.

    Returns ``(prim_func, number of flat inputs, number of flat outputs)``. With
    ``symbolic=True`` the ``Any`` dimensions become shape variables (see
    :class:`ComputeBuilder`).
    """
    from kiln.te.lowering import lower

    builder = ComputeBuilder(target, symbolic)
    inputs = _placeholders(func, builder)
    if symbolic:
        builder.inner_dims = shape_func.inner_dims(func, inputs)
    out_types = _flat_types(func.body.checked_type)
    outputs = [_bindable(o, ty, k, inputs)
               for k, (o, ty) in enumerate(zip(builder.visit(func.body), out_types))]
    sch = _schedule(builder.anchor, outputs, target, symbolic)
    # LLVM's vectors take any lane count: a 10-column block is vector code, not a loop
    # LLVM's own vectorizer spends most of the kernel's compile time on
    with any_vector_lanes(getattr(getattr(target, "kind", None), "name", None) == "llvm"):
        lowered = lower(sch, inputs + outputs, name=name)
    prim_func = lowered[name] if isinstance(lowered, IRModule) else lowered
    return prim_func, len(inputs), len(outputs)


class TECompiler:
    """Lowers primitive functions for one target, sharing kernels between equal functions.

    ``kernel_names`` is the set the compiler draws unique kernel names from; the compilers of
    one heterogeneous build share one set, so a kernel lowered for two targets gets two names
    (the host library imports the others).
    """

    def __init__(self, target: Any, mod_name: str = "default",
                 kernel_names: set[str] | None = None, build_as_lowered: bool = False) -> None:
        from kiln.target import Target

        self.target = Target(target) if isinstance(target, str) else target
        # build_as_lowered: each kernel starts compiling when it is lowered (where the
        # target's codegen can: kiln.target.build.KERNEL_BUILDERS), so that the compiler
        # works on another core while the next kernel lowers; build() then waits and links
        self._build_as_lowered = build_as_lowered
        self._builder: Any = None
        self.prefix = f"tvmgen_{mod_name}_" if mod_name else ""
        # (kind, structural hash) -> [(function, lowered)]; kind is "static", "symbolic" or
        # "shape_func"
        self._cache: dict[tuple[str, int], list[tuple[rx.Function, Any]]] = {}
        self._names: set[str] = set() if kernel_names is None else kernel_names
        self.lowered: list[LoweredFunc] = []
        # wall seconds spent lowering primitives and building the module (KILN_DEBUG=1's
        # stage breakdown of relay.build)
        self.seconds = {"lower": 0.0, "build": 0.0}
        self._context: str | None | bool = False  # compile_context_key(), on first lowering

    def lower(self, func: rx.Function, symbolic: bool = False) -> LoweredFunc:
        """The kernel of a primitive function (lowered once per structurally equal function).

        ``symbolic=True`` lowers a function with ``Any`` dimensions: its kernel is named with
        a ``_dyn`` suffix and takes buffers whose extents it reads at run time.
        """
        kind, suffix = ("symbolic", "_dyn") if symbolic else ("static", "")

        def make(key: int) -> LoweredFunc:
            name = self._kernel_name(func, suffix)
            num_ops = _count_calls(func)
            start = time.perf_counter()
            with kernel_recursion_room(num_ops):  # the key prints the function: nested calls
                disk_key = self._disk_key(kind, key, func)
                found = lowered_cache.load(disk_key) if disk_key else None
                if found is None:
                    found = lower_primitive(func, self.target, name, symbolic)
                    if disk_key:
                        lowered_cache.store(disk_key, found)
            prim_func, n_in, n_out = found
            if prim_func.attrs.get("global_symbol") != name:  # lowered under another name
                prim_func = prim_func.with_attr("global_symbol", name)
            self.seconds["lower"] += time.perf_counter() - start
            lowered = LoweredFunc(name, prim_func, _hash_text(key), n_in, n_out, num_ops)
            with kernel_recursion_room(num_ops):
                self._keep(lowered)
            return lowered

        return self._cached(kind, func, make)

    def lower_shape_func(self, func: rx.Function) -> LoweredShapeFunc:
        """The shape function of a primitive with ``Any`` dimensions (lowered once per
        structurally equal function); its kernel joins this compiler's kernels."""

        def make(key: int) -> LoweredShapeFunc:
            name = self._kernel_name(func, "_shape_func")
            kernel = shape_func.build_shape_kernel(
                func, name, lambda: ComputeBuilder(self.target, symbolic=True))
            inputs = [i for i, _ in shape_func.shape_func_inputs(func)]
            if kernel.prim_func is not None:
                self._keep(LoweredFunc(name, kernel.prim_func, _hash_text(key),
                                       kernel.num_inputs, kernel.num_outputs))
            return LoweredShapeFunc(name if kernel.prim_func is not None else None,
                                    kernel.dynamic, kernel.checked, inputs,
                                    shape_func.needs_input_data(func))

        return self._cached("shape_func", func, make)

    def _cached(self, kind: str, func: rx.Function, make: Any) -> Any:
        key = structural_hash(func)
        for seen, lowered in self._cache.get((kind, key), ()):
            if structural_equal(seen, func):
                return lowered
        lowered = make(key)
        self._cache.setdefault((kind, key), []).append((func, lowered))
        return lowered

    def _disk_key(self, kind: str, key: int, func: rx.Function) -> str | None:
        """The on-disk cache key of lowering ``func`` (None: not cached now): its structural
        hash and its text, which has what the hash leaves out (parameter names, which become
        buffer names, and types; and a 64-bit hash may collide)."""
        if self._context is False:  # the compile context is the same for every kernel
            self._context = compile_context_key()
        if self._context is None:
            return None
        return lowered_cache.key(kind, str(key), func.astext(show_meta_data=False),
                                 str(self.target), self._context)

    def _kernel_name(self, func: rx.Function, suffix: str) -> str:
        from kiln.relay.transform.fuse_ops import fused_function_name

        name = self.prefix + fused_function_name(func) + suffix
        candidate, k = name, 0
        while candidate in self._names:
            k += 1
            candidate = f"{name}_{k}"
        self._names.add(candidate)
        return candidate

    def ir_module(self) -> IRModule:
        """Every lowered PrimFunc, by kernel name."""
        return IRModule({lowered.name: lowered.prim_func for lowered in self.lowered})

    def _keep(self, lowered: LoweredFunc) -> None:
        """Add a lowered kernel (and, building as lowered, start compiling it)."""
        from kiln.target.build import KERNEL_BUILDERS

        self.lowered.append(lowered)
        if not self._build_as_lowered:
            return
        if len(self.lowered) == 1 and self.target.kind.name in ("llvm", "c"):
            # the host library build() makes loads against the runtime library, which an
            # empty cache directory compiles first: gcc does that while the kernels lower
            native.prefetch_runtime_lib()
        builder_class = KERNEL_BUILDERS.get(self.target.kind.name)
        if builder_class is None:
            return
        start = time.perf_counter()
        with self.target:
            if self._builder is None:
                self._builder = builder_class(self.target)
            self._builder.add(lowered.name, lowered.prim_func)
        self.seconds["build"] += time.perf_counter() - start

    def build(self) -> Any:
        """Compile all kernels into one runtime Module (C translation units or LLVM objects,
        linked into one library)."""
        from kiln.target.build import build_module

        deepest = max((lowered.num_ops for lowered in self.lowered), default=1)
        start = time.perf_counter()
        builder, self._builder = self._builder, None
        with kernel_recursion_room(deepest):
            if builder is not None:  # every kernel was added as it was lowered
                module = builder.finish()
            else:
                module = build_module(self.ir_module(), self.target)
        self.seconds["build"] += time.perf_counter() - start
        return module


def _hash_text(key: int) -> str:
    """The ``hash`` attribute of a kernel: the structural hash as 16 hex digits."""
    return f"{key & (2**64 - 1):016x}"
