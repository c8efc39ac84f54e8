"""The operator registry: one :class:`Op` per primitive operator name.

Entry points: :class:`Op` (``Op.get``, ``get_attr``, ``set_attr``, ``list_op_names``),
:func:`register`, :func:`register_op_attr`, :func:`get`.

An ``Op`` is a Relay expression naming a primitive operator (``add``, ``nn.conv2d``). Ops are
singletons: ``Op.get("add")`` always returns the same object, so passes compare with ``is``.
Everything a layer knows about an op lives in its attribute maps, keyed by attribute name
(TVM's ``OpAttrMap``): ``"FTVMTypeRelation"`` (type relation), ``"TOpPattern"`` (fusion
pattern), and later ``"FTVMCompute"``, ``"FTVMStrategy"``, ``"FShapeFunc"`` … Each layer adds its
attributes beside the op's definition with :func:`register_op_attr`; nothing branches on names.

Attribute values carry a priority level: a value registered with a higher level replaces a
lower one (a target-specific override), registering the same level twice is an error, and a
lower level than the present one is ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.ir.expr import RelayExpr
from kiln.ir.hooks import get_hook
from kiln.runtime.error import TVMError
from kiln.runtime.object import Object, register_object

__all__ = ["Op", "register", "register_op_attr", "get", "list_op_names", "registered_attrs"]

_OPS: dict[str, Op] = {}
# attr_key -> {op name -> (value, plevel)}
_ATTRS: dict[str, dict[str, tuple[Any, int]]] = {}


@register_object("Op")
class Op(RelayExpr):
    """A primitive operator (TVM's ``tvm.ir.Op``); get one with :meth:`Op.get`.

    Example
    -------
    >>> from kiln.ir.op import Op
    >>> import kiln.relay.op  # registers the operators
    >>> Op.get("add") is Op.get("add")
    True
    """

    _fields = {
        "name": str,
        "op_type": "any",
        "description": str,
        "arguments": "any",
        "num_inputs": int,
        "attrs_type_key": str,
        "support_level": int,
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TVMError("Op objects are singletons; use kiln.ir.op.register(name) or Op.get(name)")

    @classmethod
    def _create(cls, name: str, description: str = "") -> Op:
        op = cls.__new__(cls)
        Object.__init__(op, None, name, None, description, [], -1, "", 10)
        object.__setattr__(op, "checked_type_", None)
        return op

    @classmethod
    def _from_fields(cls, values: dict[str, Any]) -> Op:
        # Deserializing an op yields the registered singleton, never a copy.
        return cls.get(values["name"])

    def __reduce__(self):
        return (get, (self.name,))

    def __repr__(self) -> str:
        return f"Op({self.name})"

    # ----- lookup -----------------------------------------------------------------------
    @staticmethod
    def get(op_name: str) -> Op:
        """The registered operator ``op_name``; TVMError when there is none."""
        op = _OPS.get(op_name)
        if op is None:
            _load_relay_ops()
            op = _OPS.get(op_name)
        if op is None:
            raise TVMError(f"Operator {op_name} is not registered")
        return op

    @staticmethod
    def list_op_names() -> list[str]:
        """Names of all registered operators, sorted."""
        _load_relay_ops()
        return sorted(_OPS)

    # ----- attributes -------------------------------------------------------------------
    def get_attr(self, attr_name: str) -> Any:
        """The value of attribute ``attr_name`` for this op, or None when absent."""
        entry = _ATTRS.get(attr_name, {}).get(self.name)
        return None if entry is None else entry[0]

    def has_attr(self, attr_name: str) -> bool:
        return self.name in _ATTRS.get(attr_name, {})

    def set_attr(self, attr_name: str, value: Any, plevel: int = 10) -> None:
        """Set attribute ``attr_name``; a higher ``plevel`` overrides a lower one."""
        table = _ATTRS.setdefault(attr_name, {})
        present = table.get(self.name)
        if present is not None:
            if present[1] == plevel:
                raise TVMError(
                    f"Attribute {attr_name} of operator {self.name} is already registered "
                    f"with same plevel={plevel}"
                )
            if present[1] > plevel:
                return
        table[self.name] = (value, plevel)

    def reset_attr(self, attr_name: str) -> None:
        """Remove attribute ``attr_name`` from this op."""
        _ATTRS.get(attr_name, {}).pop(self.name, None)

    # ----- registration-time description (TVM's OpRegEntry setters) ----------------------
    def set_num_inputs(self, n: int) -> None:
        """Number of inputs; -1 for a variadic op."""
        self._set("num_inputs", int(n))

    def set_support_level(self, level: int) -> None:
        self._set("support_level", int(level))

    def set_attrs_type_key(self, key: str) -> None:
        self._set("attrs_type_key", key)

    def add_argument(self, name: str, type_str: str, description: str) -> None:
        self._set("arguments", [*self.arguments, (name, type_str, description)])

    def add_type_rel(self, rel_name: str, type_rel_func: Callable | None = None) -> None:
        """Attach the type relation ``type_rel_func(arg_types, attrs) -> Type``."""
        if type_rel_func is None:
            raise TVMError(f"add_type_rel({rel_name!r}) needs the relation function")
        self.set_attr("FTVMTypeRelation", type_rel_func)


def _load_relay_ops() -> None:
    # The Relay op library registers its ops on import; looking an op up must not depend on
    # whether the caller happened to import it first.
    get_hook("load_op_library")()


def register(op_name: str, describe: str = "") -> Op:
    """Create (or return the already registered) operator ``op_name``.

    Example
    -------
    >>> from kiln.ir import op as _op
    >>> my = _op.register("test.my_identity", "returns its input")
    >>> _op.get("test.my_identity") is my
    True
    """
    op = _OPS.get(op_name)
    if op is None:
        op = Op._create(op_name, describe)
        _OPS[op_name] = op
    elif describe:
        op._set("description", describe)
    return op


def get(op_name: str) -> Op:
    """The registered operator ``op_name`` (same as :meth:`Op.get`)."""
    return Op.get(op_name)


def list_op_names() -> list[str]:
    return Op.list_op_names()


def registered_attrs() -> list[tuple[str, str, Any, int]]:
    """``(attr name, op name, value, plevel)`` of every op attribute set so far (what the
    build cache looks at to tell a user's override from kiln's own registrations)."""
    return [(attr, op_name, value, plevel) for attr, table in _ATTRS.items()
            for op_name, (value, plevel) in table.items()]


def register_op_attr(op_name: str, attr_key: str, value: Any = None, level: int = 10):
    """Register attribute ``attr_key`` of operator ``op_name``.

    With ``value`` None this is a decorator, so a compute or a shape function is registered
    right where it is defined.

    Example
    -------
    >>> from kiln.ir.op import register, register_op_attr
    >>> _ = register("test.my_double")
    >>> @register_op_attr("test.my_double", "FNumpyEval")
    ... def _double(inputs, attrs):
    ...     return inputs[0] * 2
    >>> register_op_attr("test.my_double", "TOpPattern", 0)
    """

    def attach(v: Any) -> Any:
        op = _OPS.get(op_name)
        if op is None:
            op = Op.get(op_name)
        op.set_attr(attr_key, v, level)
        return v

    if value is None:
        return attach
    attach(value)
    return None

