"""ONNX → Relay: ``relay.frontend.from_onnx`` (TVM's entry point and return convention).

Entry points: :func:`from_onnx`, :func:`load_model`, :class:`GraphConverter`,
:func:`onnx_dtype`.

The converter walks the graph in order (ONNX graphs are topologically sorted), turning each
node into Relay through the converter registered for its op type and the model's opset
(:mod:`.onnx_registry`; the op families live in ``onnx_ops_*.py``). A node whose inputs are all
constants is evaluated on the spot, so shape arithmetic (``Shape → Gather → Concat →
Reshape``) folds to constants and the shape ops stay static. Before converting anything, every
op of the model (subgraphs included) is checked, and all unsupported ones are reported in one
:class:`~kiln.runtime.error.OpNotImplemented`.

Example
-------
>>> import onnx
>>> from onnx import helper, TensorProto
>>> from kiln import relay
>>> graph = helper.make_graph(
...     [helper.make_node("Relu", ["x"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
>>> mod, params = relay.frontend.from_onnx(helper.make_model(graph))
>>> mod["main"].params[0].name_hint
'x'
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from kiln.ir.module import IRModule
from kiln.relay import expr as rx
from kiln.relay.frontend import (  # noqa: F401  (each module registers its converters)
    onnx_ops_attention,
    onnx_ops_control,
    onnx_ops_detection,
    onnx_ops_image,
    onnx_ops_math,
    onnx_ops_ml,
    onnx_ops_nn,
    onnx_ops_quant,
    onnx_ops_rnn,
    onnx_ops_sequence,
    onnx_ops_signal,
    onnx_ops_tensor,
    onnx_ops_unique,
)
from kiln.relay.frontend.common import AnyDim, infer_shape, infer_type, new_var
from kiln.relay.frontend.onnx_functions import expand_function, has_function_body
from kiln.relay.frontend.onnx_registry import get_converter
from kiln.runtime.dtype import dtype_str
from kiln.runtime.error import OpError, OpNotImplemented, TVMError

__all__ = ["from_onnx", "load_model", "GraphConverter", "onnx_dtype", "DEFAULT_DOMAINS"]

DEFAULT_DOMAINS = ("", "ai.onnx")
ML_DOMAIN = "ai.onnx.ml"


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is a declared test dependency
        raise TVMError("relay.frontend.from_onnx needs the 'onnx' package") from exc
    return onnx


def onnx_dtype(elem_type: int) -> str:
    """The Relay dtype string of an ONNX ``TensorProto`` element type.

    Example
    -------
    >>> onnx_dtype(1), onnx_dtype(7), onnx_dtype(9)
    ('float32', 'int64', 'bool')
    """
    onnx = _onnx()
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError) as exc:
        raise TVMError(f"ONNX element type {elem_type} is not a known tensor type") from exc
    try:  # bfloat16, the 8-bit floats and int4/uint4/int2/uint2 come as ml_dtypes types
        return dtype_str(dtype)
    except TVMError:
        name = onnx.TensorProto.DataType.Name(elem_type)
        raise OpNotImplemented(f"ONNX element type {name} has no kiln dtype") from None


def load_model(model: Any) -> Any:
    """An ``onnx.ModelProto`` from a ModelProto, a path or serialized bytes, checked by
    ``onnx.checker``; external-data weights next to a path are loaded."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise TVMError(f"no ONNX model file at {path!r}")
        try:
            proto = onnx.load(path)
        except Exception as exc:
            raise TVMError(f"{path!r} is not a readable ONNX model: {exc}") from exc
    elif isinstance(model, (bytes, bytearray)):
        try:
            proto = onnx.load_from_string(bytes(model))
        except Exception as exc:
            raise TVMError(f"the bytes are not a serialized ONNX model: {exc}") from exc
    else:
        raise TVMError(f"from_onnx takes an onnx.ModelProto, a path or bytes, got "
                       f"{type(model).__name__}")
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise TVMError(f"the ONNX model fails onnx.checker: {exc}") from exc
    return proto


def model_opset(model: Any) -> int:
    """The default-domain opset the model imports (1 if it names none)."""
    for entry in model.opset_import:
        if entry.domain in DEFAULT_DOMAINS:
            return int(entry.version)
    return 1


def attribute_value(attr: Any) -> Any:
    """An ONNX AttributeProto as a Python value (str for strings, ndarray for tensors)."""
    onnx = _onnx()
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    return value


def _all_nodes(graph: Any) -> Iterator[Any]:
    """Every node of ``graph`` and of its subgraphs (If branches, Loop/Scan bodies)."""
    onnx = _onnx()
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _all_nodes(sub)


def domain_opset(model: Any, domain: str) -> int:
    """The opset ``model`` imports for ``domain`` (1 if it names none)."""
    for entry in model.opset_import:
        if entry.domain == domain:
            return int(entry.version)
    return 1


def node_converter(node: Any, opset: int, ml_opset: int = 1) -> Any:
    """The registered converter of ``node``: default-domain ops by op type at ``opset``,
    ``ai.onnx.ml`` ops as ``"ai.onnx.ml.<op>"`` at ``ml_opset``, other domains' ops (such as
    com.microsoft's QLinear ops) as ``"<domain>.<op>"``; None when kiln has none."""
    if node.domain in DEFAULT_DOMAINS:
        return get_converter(node.op_type, opset)
    if node.domain == ML_DOMAIN:
        return get_converter(f"{ML_DOMAIN}.{node.op_type}", ml_opset)
    return get_converter(f"{node.domain}.{node.op_type}", opset)


def unsupported_ops(graph: Any, opset: int, ml_opset: int = 1) -> list[str]:
    """Sorted op types of ``graph`` (subgraphs included) that kiln cannot convert at ``opset``
    (an op without a converter converts through its ONNX function body when it has one)."""
    missing = set()
    for node in _all_nodes(graph):
        if node_converter(node, opset, ml_opset) is not None:
            continue
        if node.domain not in DEFAULT_DOMAINS:
            if not has_function_body(node.op_type, opset, node.domain):
                missing.add(f"{node.domain}.{node.op_type}")
        elif not has_function_body(node.op_type, opset):
            missing.add(node.op_type)
    return sorted(missing)


class GraphConverter:
    """Converts one ONNX graph to Relay; subgraphs get a child converter seeing the outer
    scope's values. Converters use it as ``ctx``: :meth:`shape`, :meth:`dtype`,
    :meth:`value`, :meth:`convert_subgraph`, :meth:`add_function`."""

    def __init__(self, shape: dict | None = None, dtype: Any = "float32", opset: int = 1,
                 freeze_params: bool = True, parent: GraphConverter | None = None) -> None:
        self.shape_dict = dict(shape or {})
        self.dtype_spec = dtype
        self.opset = opset
        self.ml_opset = 1 if parent is None else parent.ml_opset  # the ai.onnx.ml opset
        self.freeze_params = freeze_params
        self.parent = parent
        self.values: dict[str, Any] = {}
        self.input_vars: list[rx.Var] = []
        self.param_vars: list[rx.Var] = []
        self.params: dict[str, np.ndarray] = {} if parent is None else parent.params
        self.module = IRModule() if parent is None else parent.module
        self._name_counter = [0] if parent is None else parent._name_counter
        self.num_outputs = 1  # output count of the node being converted

    # -- the helpers converters use -----------------------------------------------------
    def shape(self, expr: Any) -> tuple:
        """The shape of ``expr`` (ints, ``relay.Any()`` for unknown dims)."""
        return infer_shape(expr, self.module)

    def dtype(self, expr: Any) -> str:
        """The dtype string of ``expr``."""
        return str(infer_type(expr, self.module).dtype)

    def rank(self, expr: Any) -> int:
        """The number of dimensions of ``expr``."""
        return len(self.shape(expr))

    def value(self, expr: Any) -> np.ndarray | None:
        """The NumPy value of ``expr`` when it is a constant or an initializer, else None."""
        if expr is None:
            return None
        if isinstance(expr, rx.Constant):
            return expr.data.numpy()
        if isinstance(expr, rx.Var) and expr.name_hint in self.params:
            return self.params[expr.name_hint]
        return None

    def fresh_name(self, stem: str) -> str:
        """A model-unique name for a helper variable or global function."""
        self._name_counter[0] += 1
        return f"{stem}_{self._name_counter[0]}"

    def add_function(self, stem: str, func: rx.Function) -> Any:
        """Add ``func`` as a global function of the module being built; returns its GlobalVar.

        The GlobalVar is created first, so ``func`` may be built by a callback that calls it.
        """
        from kiln.ir.expr import GlobalVar

        gvar = GlobalVar(self.fresh_name(stem))
        self.module[gvar] = func
        return gvar

    def global_var(self, stem: str) -> Any:
        """A fresh GlobalVar to define later with :meth:`define_function` (for recursion)."""
        from kiln.ir.expr import GlobalVar

        return GlobalVar(self.fresh_name(stem))

    def define_function(self, gvar: Any, func: rx.Function) -> None:
        """Bind ``gvar`` to ``func`` in the module being built."""
        self.module[gvar] = func

    def lookup(self, name: str) -> Any:
        """The Relay value named ``name`` in this graph or an enclosing one."""
        scope: GraphConverter | None = self
        while scope is not None:
            if name in scope.values:
                return scope.values[name]
            scope = scope.parent
        raise TVMError(f"ONNX value {name!r} is used before it is produced")

    def convert_subgraph(self, graph: Any, inputs: list[Any]) -> list[Any]:
        """Convert a subgraph (If branch, Loop/Scan body) whose formal inputs take ``inputs``;
        returns its outputs as Relay expressions."""
        child = GraphConverter(opset=self.opset, freeze_params=self.freeze_params, parent=self)
        if len(inputs) != len(graph.input):
            raise TVMError(f"subgraph {graph.name!r} takes {len(graph.input)} inputs, "
                           f"given {len(inputs)}")
        for formal, actual in zip(graph.input, inputs):
            child.values[formal.name] = actual
        child._load_initializers(graph)
        child._convert_nodes(graph)
        return [child.lookup(out.name) for out in graph.output]

    # -- whole models ----------------------------------------------------------------------
    def from_model(self, model: Any) -> tuple[IRModule, dict]:
        """Convert ``model``'s main graph; returns ``(mod, params)``."""
        from kiln.relay.qnn.fake_quantization import FakeQuantizationToInteger
        from kiln.relay.qnn.transform import has_qnn_ops
        from kiln.relay.transform import InferType
        from kiln.runtime import ndarray

        graph = model.graph
        missing = unsupported_ops(graph, self.opset, self.ml_opset)
        if missing:
            raise OpNotImplemented(
                f"the following operators are not supported by kiln's ONNX frontend at opset "
                f"{self.opset}: {', '.join(missing)}")
        self._load_initializers(graph)
        self._load_inputs(graph)
        self._convert_nodes(graph)
        outputs = [self.lookup(out.name) for out in graph.output]
        body = outputs[0] if len(outputs) == 1 else rx.Tuple(outputs)
        func = rx.Function(self.input_vars + self.param_vars, body)
        mod = IRModule.from_expr(func, functions={
            gv: self.module[gv] for gv in self.module.get_global_vars()},
            type_defs=dict(self.module.type_definitions))
        mod = InferType()(mod)
        if self.parent is None and has_qnn_ops(mod):
            # QDQ regions and the QLinear ops run as integer QNN ops (as ONNX Runtime's own
            # QDQ fusion does); TVM leaves this pass to the user
            mod = FakeQuantizationToInteger()(mod)
        params = {name: ndarray.array(value) for name, value in self.params.items()}
        return mod, params

    def _load_initializers(self, graph: Any) -> None:
        onnx = _onnx()
        for init in graph.initializer:
            try:
                array = onnx.numpy_helper.to_array(init)
            except Exception as exc:
                raise TVMError(f"cannot read initializer {init.name!r}: {exc}") from exc
            dtype = onnx_dtype(init.data_type)
            array = np.asarray(array).astype(dtype, copy=False)
            if self.freeze_params or self.parent is not None:
                self.values[init.name] = rx.const(array, dtype)
            else:
                var = new_var(init.name, array.shape, dtype)
                self.params[init.name] = array
                self.param_vars.append(var)
                self.values[init.name] = var

    def _input_dtype(self, name: str, elem_type: int) -> str:
        if isinstance(self.dtype_spec, dict) and name in self.dtype_spec:
            return str(self.dtype_spec[name])
        if elem_type:
            return onnx_dtype(elem_type)
        return str(self.dtype_spec) if isinstance(self.dtype_spec, str) else "float32"

    def _load_inputs(self, graph: Any) -> None:
        for inp in graph.input:
            if inp.name in self.values:  # an initializer shadows the input of the same name
                continue
            if inp.type.WhichOneof("value") != "tensor_type":  # a sequence or an optional
                ty = onnx_ops_sequence.relay_type(inp.type, self.shape_dict.get(inp.name),
                                                  inp.name, self.module)
                var = rx.var(inp.name, type_annotation=ty)
                self.input_vars.append(var)
                self.values[inp.name] = var
                continue
            tensor_type = inp.type.tensor_type
            if inp.name in self.shape_dict:
                # relay.Any() in a user's shape leaves that dim symbolic, as in TVM
                shape = tuple(d if isinstance(d, AnyDim) else int(d)
                              for d in self.shape_dict[inp.name])
            else:
                shape = tuple(
                    int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                    else AnyDim() for d in tensor_type.shape.dim)
            var = new_var(inp.name, shape, self._input_dtype(inp.name, tensor_type.elem_type))
            self.input_vars.append(var)
            self.values[inp.name] = var

    def _convert_nodes(self, graph: Any) -> None:
        for node in graph.node:
            self.convert_node(node)

    def convert_node(self, node: Any) -> None:
        """Convert one node, binding its outputs in this scope."""
        impl = node_converter(node, self.opset, self.ml_opset)
        if impl is None and has_function_body(node.op_type, self.opset, node.domain):
            def impl(inputs, attrs, ctx):
                return expand_function(node, inputs, ctx)
        if impl is None:
            raise OpNotImplemented(f"ONNX op {node.op_type} (opset {self.opset}) is not "
                                   "supported by kiln")
        inputs = [self.lookup(name) if name else None for name in node.input]
        attrs = {attr.name: attribute_value(attr) for attr in node.attribute}
        where = f"ONNX node {node.name or node.output[0]!r} ({node.op_type})"
        self.num_outputs = len(node.output)
        try:
            result = impl(inputs, attrs, self)
            outputs = _as_output_list(result)
            if len(outputs) < len([o for o in node.output if o]):
                raise TVMError(f"the converter produced {len(outputs)} outputs, the node "
                               f"names {len(node.output)}")
            # a dequantized constant (a QDQ weight) stays quantized, for the integer path
            if all(isinstance(i, rx.Constant) for i in inputs if i is not None) and \
                    node.op_type != "DequantizeLinear":
                # a subgraph may capture outer values: fold only closed results
                closed = not any(a.type in (5, 10) for a in node.attribute)
                outputs = [_fold(out, self.module, check_closed=not closed) for out in outputs]
        except OpError as exc:
            raise type(exc)(f"{where}: {exc}") from exc
        except TVMError as exc:
            raise TVMError(f"{where}: {exc}") from exc
        except (ValueError, TypeError, IndexError, KeyError) as exc:
            raise TVMError(f"{where}: {type(exc).__name__}: {exc}") from exc
        for name, out in zip(node.output, outputs):
            if name:
                self.values[name] = out


def _as_output_list(result: Any) -> list[Any]:
    if isinstance(result, rx.TupleWrapper):
        return [result[i] for i in range(len(result))]
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _fold(expr: Any, mod: IRModule, check_closed: bool = False) -> Any:
    """Evaluate a closed expression to a Constant (tensors only; other values are kept)."""
    from kiln.ir.adt import Constructor
    from kiln.ir.type import TensorType
    from kiln.relay.analysis import free_vars
    from kiln.relay.frontend.common import fold_constant

    if isinstance(expr, rx.Call) and isinstance(expr.op, Constructor):
        return expr  # an ADT value (an optional), typed only where it is used
    if isinstance(expr, rx.Constant) or not isinstance(infer_type(expr, mod), TensorType):
        return expr
    if check_closed and free_vars(expr):
        return expr
    return fold_constant(expr, mod)


def from_onnx(model: Any, shape: dict | None = None, dtype: Any = "float32",
              opset: int | None = None, freeze_params: bool = True,
              convert_config: dict | None = None) -> tuple[IRModule, dict]:
    """Convert an ONNX model to a Relay module (TVM's ``relay.frontend.from_onnx``).

    Parameters
    ----------
    model : onnx.ModelProto, path or bytes
        The model; a path may have external-data weights beside it.
    shape : dict, optional
        Input name -> shape; pins dims the model leaves symbolic (else ``relay.Any()``).
    dtype : str or dict
        Dtype for inputs whose type the model leaves unset (or name -> dtype overrides).
    opset : int, optional
        Override the model's default-domain opset.
    freeze_params : bool
        True: initializers become constants (``params`` is empty). False: they become
        parameters of ``main``, returned in ``params``.
    convert_config : dict, optional
        Accepted for TVM compatibility; kiln has no conversion options.

    Returns
    -------
    (IRModule, dict[str, NDArray])

    Example
    -------
    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> from kiln import relay
    >>> w = numpy_helper.from_array(np.ones((2, 2), "float32"), "w")
    >>> graph = helper.make_graph(
    ...     [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])], [w])
    >>> mod, params = relay.frontend.from_onnx(helper.make_model(graph), freeze_params=False)
    >>> sorted(params)
    ['w']
    """
    del convert_config
    proto = load_model(model)
    converter = GraphConverter(shape, dtype, int(opset) if opset else model_opset(proto),
                               freeze_params)
    converter.ml_opset = domain_opset(proto, ML_DOMAIN)
    return converter.from_model(proto)
