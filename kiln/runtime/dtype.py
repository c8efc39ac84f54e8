"""Data types: TVM's ``DLDataType`` triple (type code, bits, lanes) and its string form.

Entry points: :class:`DataType`, :class:`DataTypeCode`, :func:`dtype_str`.

A :class:`DataType` is built from a string (``"float32"``, ``"int8x4"``, ``"bool"``,
``"bfloat16"``, ``"handle"``), a NumPy dtype or scalar type, or another DataType. It prints as
TVM prints it and compares equal to its string, so ``DataType("float32") == "float32"`` and a
dict keyed by DataType finds ``"float32"``.

``bool`` is TVM's ``uint1`` (stored one byte per element); ``bfloat16`` maps to
``ml_dtypes.bfloat16`` when ml_dtypes is installed and to its ``uint16`` bit pattern otherwise,
so the core needs only NumPy.

The 8-bit floats ``float8_e4m3fn``, ``float8_e4m3fnuz``, ``float8_e5m2`` and
``float8_e5m2fnuz`` (ONNX's FLOAT8E4M3FN … and ml_dtypes' names; TVM v0.16's spellings
``e4m3_float8`` and ``e5m2_float8`` parse too) carry DLPack 1.1's type codes (10-13: TVM
v0.16's 6 and 7 would collide with DLPack's ``kDLBool`` = 6). They and the sub-byte integers
``int4``/``uint4``/``int2``/``uint2`` are stored one byte per element, as ml_dtypes stores them
(a narrow integer in the low bits, the high bits zero), and need ml_dtypes for NumPy views.
"""

from __future__ import annotations

import re
from enum import IntEnum
from typing import Any

import numpy as np

from kiln.runtime.error import TVMError

__all__ = ["DataTypeCode", "DataType", "dtype_str", "BFLOAT16_NUMPY", "FLOAT8_CODES"]

try:  # optional: a real bfloat16 NumPy scalar type
    import ml_dtypes

    BFLOAT16_NUMPY: np.dtype | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    BFLOAT16_NUMPY = None


class DataTypeCode(IntEnum):
    """TVM's type codes (``DLDataTypeCode`` plus ``kTVMOpaqueHandle`` = 3)."""

    INT = 0
    UINT = 1
    FLOAT = 2
    HANDLE = 3
    BFLOAT = 4
    FLOAT8_E4M3FN = 10  # DLPack 1.1 kDLFloat8_e4m3fn
    FLOAT8_E4M3FNUZ = 11
    FLOAT8_E5M2 = 12
    FLOAT8_E5M2FNUZ = 13


FLOAT8_CODES = frozenset({DataTypeCode.FLOAT8_E4M3FN, DataTypeCode.FLOAT8_E4M3FNUZ,
                          DataTypeCode.FLOAT8_E5M2, DataTypeCode.FLOAT8_E5M2FNUZ})
# The 8-bit floats go by name (a code alone does not say which format): printed name -> code.
_FLOAT8_NAMES = {
    "float8_e4m3fn": DataTypeCode.FLOAT8_E4M3FN,
    "float8_e4m3fnuz": DataTypeCode.FLOAT8_E4M3FNUZ,
    "float8_e5m2": DataTypeCode.FLOAT8_E5M2,
    "float8_e5m2fnuz": DataTypeCode.FLOAT8_E5M2FNUZ,
}
_FLOAT8_ALIASES = {"e4m3_float8": "float8_e4m3fn", "e5m2_float8": "float8_e5m2"}  # TVM v0.16
_FLOAT8_RE = re.compile(r"^(float8_e[45]m[23](?:fn)?(?:uz)?|e4m3_float8|e5m2_float8)"
                        r"(?:x(\d+))?$")


_CODE_PREFIX = {
    DataTypeCode.INT: "int",
    DataTypeCode.UINT: "uint",
    DataTypeCode.FLOAT: "float",
    DataTypeCode.BFLOAT: "bfloat",
}
# Longest prefix first so "bfloat16" is not read as "b" + "float16".
_PREFIX_CODE = [
    ("bfloat", DataTypeCode.BFLOAT),
    ("float", DataTypeCode.FLOAT),
    ("uint", DataTypeCode.UINT),
    ("int", DataTypeCode.INT),
]
# Bit widths a scalar of each code may have (TIR allows narrow integers such as int4).
_VALID_BITS = {
    DataTypeCode.INT: frozenset(range(1, 65)),
    DataTypeCode.UINT: frozenset(range(1, 65)),
    DataTypeCode.FLOAT: frozenset({16, 32, 64}),
    DataTypeCode.BFLOAT: frozenset({16}),
    DataTypeCode.HANDLE: frozenset({0, 64}),
    **{code: frozenset({8}) for code in FLOAT8_CODES},
}
_DEFAULT_BITS = 32  # "int", "uint", "float" alone mean 32 bits, as in TVM
_TYPE_RE = re.compile(r"^([a-z]+)(\d*)(?:x(\d+))?$")

_NUMPY_OF = {
    (DataTypeCode.INT, 8): np.dtype("int8"),
    (DataTypeCode.INT, 16): np.dtype("int16"),
    (DataTypeCode.INT, 32): np.dtype("int32"),
    (DataTypeCode.INT, 64): np.dtype("int64"),
    (DataTypeCode.UINT, 1): np.dtype("bool"),
    (DataTypeCode.UINT, 8): np.dtype("uint8"),
    (DataTypeCode.UINT, 16): np.dtype("uint16"),
    (DataTypeCode.UINT, 32): np.dtype("uint32"),
    (DataTypeCode.UINT, 64): np.dtype("uint64"),
    (DataTypeCode.FLOAT, 16): np.dtype("float16"),
    (DataTypeCode.FLOAT, 32): np.dtype("float32"),
    (DataTypeCode.FLOAT, 64): np.dtype("float64"),
    (DataTypeCode.BFLOAT, 16): BFLOAT16_NUMPY if BFLOAT16_NUMPY is not None else np.dtype("uint16"),
    (DataTypeCode.HANDLE, 64): np.dtype("uint64"),
}
_FROM_NUMPY = {
    np_dtype: (code, bits)
    for (code, bits), np_dtype in _NUMPY_OF.items()
    if code not in (DataTypeCode.HANDLE, DataTypeCode.BFLOAT)
}
if BFLOAT16_NUMPY is not None:
    _FROM_NUMPY[BFLOAT16_NUMPY] = (DataTypeCode.BFLOAT, 16)
    # ml_dtypes' types of the 8-bit floats and sub-byte integers (no NumPy view without it)
    _ML_DTYPES = {**{(code, 8): name for name, code in _FLOAT8_NAMES.items()},
                  (DataTypeCode.INT, 4): "int4", (DataTypeCode.UINT, 4): "uint4",
                  (DataTypeCode.INT, 2): "int2", (DataTypeCode.UINT, 2): "uint2"}
    for _fields, _name in _ML_DTYPES.items():
        if hasattr(ml_dtypes, _name):  # int2/uint2 arrived in ml_dtypes 0.5
            _NUMPY_OF[_fields] = np.dtype(getattr(ml_dtypes, _name))
            _FROM_NUMPY[_NUMPY_OF[_fields]] = _fields

_FLOAT8_NAME_OF = {code: name for name, code in _FLOAT8_NAMES.items()}

_PARSE_CACHE: dict[str, tuple[int, int, int]] = {}
_INSTANCES: dict[str, DataType] = {}


def _parse(text: str) -> tuple[int, int, int]:
    """``"float32x4"`` -> ``(FLOAT, 32, 4)``; TVMError naming the string when invalid."""
    cached = _PARSE_CACHE.get(text)
    if cached is not None:
        return cached
    fields = _parse_uncached(text)
    _PARSE_CACHE[text] = fields
    return fields


def _parse_uncached(text: str) -> tuple[int, int, int]:
    if text == "handle":
        return (DataTypeCode.HANDLE, 64, 1)
    if text == "void":
        return (DataTypeCode.HANDLE, 0, 0)
    named = _FLOAT8_RE.match(text)
    if named is not None:
        name = _FLOAT8_ALIASES.get(named.group(1), named.group(1))
        if name not in _FLOAT8_NAMES:
            raise TVMError(f"unknown data type {text!r}; the 8-bit floats are "
                           + ", ".join(_FLOAT8_NAMES))
        lanes = int(named.group(2)) if named.group(2) else 1
        if not 1 <= lanes <= 0xFFFF:
            raise TVMError(f"unknown data type {text!r}: lanes must be in [1, 65535]")
        return (_FLOAT8_NAMES[name], 8, lanes)
    match = _TYPE_RE.match(text)
    if match is None:
        raise TVMError(f"unknown data type {text!r}")
    name, bits_text, lanes_text = match.groups()
    lanes = int(lanes_text) if lanes_text else 1
    if name == "bool" and not bits_text:
        code, bits = DataTypeCode.UINT, 1
    else:
        code = next((c for prefix, c in _PREFIX_CODE if name == prefix), None)
        if code is None:
            raise TVMError(f"unknown data type {text!r}")
        bits = int(bits_text) if bits_text else _DEFAULT_BITS
    if bits not in _VALID_BITS[code]:
        raise TVMError(f"unknown data type {text!r}: {_CODE_PREFIX[code]} cannot have {bits} bits")
    if not 1 <= lanes <= 0xFFFF:
        raise TVMError(f"unknown data type {text!r}: lanes must be in [1, 65535]")
    return (code, bits, lanes)


class DataType:
    """A scalar or vector data type: ``type_code``, ``bits``, ``lanes``.

    Example
    -------
    >>> t = DataType("float32x4")
    >>> (int(t.type_code), t.bits, t.lanes, t.itemsize)
    (2, 32, 4, 16)
    >>> t.element_of == "float32", str(DataType("bool")), DataType(np.int8)
    (True, 'bool', DataType('int8'))
    """

    __slots__ = ("type_code", "bits", "lanes", "_str")

    def __new__(cls, value: Any) -> DataType:
        # DataTypes are immutable, so one instance per spelling is shared.
        if isinstance(value, str):
            cached = _INSTANCES.get(value)
            if cached is None:
                cached = _INSTANCES[value] = cls.from_fields(*_parse(value))
            return cached
        if isinstance(value, DataType):
            return value
        return DataType.from_numpy(value)

    @classmethod
    def from_fields(cls, type_code: int, bits: int, lanes: int = 1) -> DataType:
        """Build from the raw ``DLDataType`` triple, validating it (TVMError if invalid)."""
        try:
            code = DataTypeCode(type_code)
        except ValueError:
            raise TVMError(f"invalid data type: unknown type code {type_code}") from None
        void = code == DataTypeCode.HANDLE and bits == 0 and lanes == 0
        if bits not in _VALID_BITS[code] or not (void or 1 <= lanes <= 0xFFFF):
            raise TVMError(
                f"invalid data type: code {code.name.lower()} with {bits} bits, {lanes} lanes"
            )
        obj = object.__new__(cls)
        object.__setattr__(obj, "type_code", code)
        object.__setattr__(obj, "bits", bits)
        object.__setattr__(obj, "lanes", lanes)
        object.__setattr__(obj, "_str", _format(code, bits, lanes))
        return obj

    @staticmethod
    def from_numpy(value: Any) -> DataType:
        """The DataType of a NumPy dtype or scalar type (TVMError for unsupported ones)."""
        try:
            np_dtype = np.dtype(value)
        except TypeError:
            raise TVMError(f"cannot interpret {value!r} as a data type") from None
        fields = _FROM_NUMPY.get(np_dtype)
        if fields is None:
            raise TVMError(f"NumPy dtype {np_dtype} has no kiln data type")
        return DataType.from_fields(fields[0], fields[1], 1)

    def as_tuple(self) -> tuple[int, int, int]:
        """``(type_code, bits, lanes)`` as plain ints (the ``DLDataType`` fields)."""
        return (int(self.type_code), self.bits, self.lanes)

    @property
    def itemsize(self) -> int:
        """Bytes per element: ``(bits * lanes + 7) // 8``."""
        return (self.bits * self.lanes + 7) // 8

    @property
    def element_of(self) -> DataType:
        """The scalar type of one lane."""
        return self if self.lanes == 1 else self.with_lanes(1)

    def with_lanes(self, lanes: int) -> DataType:
        """The same scalar type with ``lanes`` lanes."""
        return DataType.from_fields(self.type_code, self.bits, lanes)

    @property
    def numpy_dtype(self) -> np.dtype:
        """NumPy dtype of one lane (bfloat16 without ml_dtypes: its uint16 bit pattern)."""
        np_dtype = _NUMPY_OF.get((self.type_code, self.bits))
        if np_dtype is None:
            needs = " (install ml_dtypes for it)" if self.type_code in FLOAT8_CODES or \
                self.bits in (2, 4) else ""
            raise TVMError(f"data type {self._str} has no NumPy equivalent{needs}")
        return np_dtype

    @property
    def is_float(self) -> bool:
        return self.type_code in (DataTypeCode.FLOAT, DataTypeCode.BFLOAT) \
            or self.type_code in FLOAT8_CODES

    @property
    def is_float8(self) -> bool:
        return self.type_code in FLOAT8_CODES

    @property
    def is_int(self) -> bool:
        return self.type_code == DataTypeCode.INT

    @property
    def is_uint(self) -> bool:
        return self.type_code == DataTypeCode.UINT

    @property
    def is_bool(self) -> bool:
        return self.type_code == DataTypeCode.UINT and self.bits == 1

    @property
    def is_handle(self) -> bool:
        return self.type_code == DataTypeCode.HANDLE

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("DataType is immutable")

    def __str__(self) -> str:
        return self._str

    def __repr__(self) -> str:
        return f"DataType({self._str!r})"

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, DataType):
            return self._str == other._str
        if isinstance(other, str):
            try:
                return _format(*_parse(other)) == self._str
            except TVMError:
                return False
        if isinstance(other, np.dtype | type):
            try:
                return DataType.from_numpy(other)._str == self._str
            except TVMError:
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._str)

    def __reduce__(self):
        return (DataType, (self._str,))


def _format(code: int, bits: int, lanes: int) -> str:
    """TVM's printed form: ``bool``, ``handle``, ``void``, ``float32``, ``int8x4``."""
    if code == DataTypeCode.UINT and bits == 1 and lanes == 1:
        return "bool"
    if code == DataTypeCode.HANDLE:
        return "void" if bits == 0 and lanes == 0 else "handle"
    base = _FLOAT8_NAME_OF.get(code) or f"{_CODE_PREFIX[code]}{bits}"
    return base if lanes == 1 else f"{base}x{lanes}"


def dtype_str(value: Any) -> str:
    """The canonical string of anything :class:`DataType` accepts.

    Example
    -------
    >>> dtype_str("float"), dtype_str(np.float64), dtype_str(DataType("int8x4"))
    ('float32', 'float64', 'int8x4')
    """
    if isinstance(value, DataType):
        return value._str
    if isinstance(value, str):
        return _format(*_parse(value))
    return DataType(value)._str
