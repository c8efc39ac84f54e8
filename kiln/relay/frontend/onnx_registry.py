"""The ONNX op converter registry: one converter class per ONNX op, versions as methods.

Entry points: :class:`OnnxOpConverter`, :func:`register`, :func:`register_function`,
:data:`CONVERTERS`, :func:`get_converter`.

A converter class defines ``_impl_vN(cls, inputs, attrs, ctx)`` classmethods, one per opset
version N where the op's semantics changed; :meth:`OnnxOpConverter.get_converter` picks the
highest N not above the model's opset. ``inputs`` is a list of Relay expressions (None for an
omitted optional input), ``attrs`` a dict of Python values, ``ctx`` the graph converter (for
shapes, constant values and subgraphs). An implementation returns one expression, or a list of
them for an op with several outputs.

Example
-------
>>> from kiln.relay.frontend.onnx_registry import get_converter
>>> get_converter("Relu", 14) is not None
True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln.runtime.error import OpAttributeRequired, OpNotImplemented

__all__ = ["OnnxOpConverter", "register", "register_function", "CONVERTERS", "get_converter",
           "required"]

_PREFIX = "_impl_v"


class OnnxOpConverter:
    """Base of op converters; subclasses add ``_impl_vN`` classmethods."""

    @classmethod
    def versions(cls) -> list[int]:
        """The opset versions this converter has an implementation for, ascending."""
        return sorted(int(name[len(_PREFIX):]) for name in dir(cls) if name.startswith(_PREFIX))

    @classmethod
    def get_converter(cls, opset: int) -> Callable | None:
        """The implementation for ``opset``: the highest version not above it, or None."""
        usable = [v for v in cls.versions() if v <= opset]
        return getattr(cls, f"{_PREFIX}{usable[-1]}") if usable else None


CONVERTERS: dict[str, type[OnnxOpConverter]] = {}


def register(*op_names: str) -> Callable:
    """Class decorator: register a converter class under one or more ONNX op types."""

    def decorate(cls: type[OnnxOpConverter]) -> type[OnnxOpConverter]:
        for name in op_names:
            CONVERTERS[name] = cls
        return cls

    return decorate


def register_function(op_name: str, func: Callable, since: int = 1) -> None:
    """Register a one-version converter ``func(inputs, attrs, ctx)`` valid from opset ``since``."""

    def impl(cls, inputs, attrs, ctx):
        return func(inputs, attrs, ctx)

    members = {f"{_PREFIX}{since}": classmethod(impl)}
    CONVERTERS[op_name] = type(op_name, (OnnxOpConverter,), members)


def get_converter(op_name: str, opset: int) -> Callable | None:
    """The implementation of ``op_name`` for ``opset``, or None if kiln has none."""
    cls = CONVERTERS.get(op_name)
    return cls.get_converter(opset) if cls is not None else None


def required(attrs: dict, name: str, op_name: str) -> Any:
    """``attrs[name]``, or OpAttributeRequired naming the op and attribute."""
    if name not in attrs:
        raise OpAttributeRequired(f"ONNX {op_name} needs the attribute {name!r}")
    return attrs[name]


def unsupported(op_name: str, what: str) -> OpNotImplemented:
    """An OpNotImplemented error for one unsupported attribute value of an op."""
    return OpNotImplemented(f"ONNX {op_name}: {what} is not supported by kiln")
