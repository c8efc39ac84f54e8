"""Little-endian binary writer and bounds-checked reader for TVM's dmlc-style formats.

Entry points: :class:`BinaryWriter`, :class:`BinaryReader`.

Conventions (dmlc serializer): ``string`` = u64 length + bytes; ``vector<POD>`` = u64 count +
raw elements; ``vector<string>`` = u64 count + each string; ``DLDevice`` = i32 type, i32 id;
``DLDataType`` = u8 code, u8 bits, u16 lanes. The reader checks every length against the
bytes actually present and raises :class:`~kiln.runtime.error.TVMError` naming what it was
reading, so a truncated or tampered file never reads past the buffer or allocates wildly.
"""

from __future__ import annotations

import struct

from kiln.runtime.error import TVMError

__all__ = ["BinaryWriter", "BinaryReader"]

_U8, _U16 = struct.Struct("<B"), struct.Struct("<H")
_I32, _U32 = struct.Struct("<i"), struct.Struct("<I")
_I64, _U64, _F64 = struct.Struct("<q"), struct.Struct("<Q"), struct.Struct("<d")


class BinaryWriter:
    """Accumulates little-endian fields; ``getvalue()`` returns the bytes."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def raw(self, data: bytes) -> None:
        self._parts.append(bytes(data))

    def u8(self, v: int) -> None:
        self._parts.append(_U8.pack(v))

    def u16(self, v: int) -> None:
        self._parts.append(_U16.pack(v))

    def i32(self, v: int) -> None:
        self._parts.append(_I32.pack(v))

    def u32(self, v: int) -> None:
        self._parts.append(_U32.pack(v))

    def i64(self, v: int) -> None:
        self._parts.append(_I64.pack(v))

    def u64(self, v: int) -> None:
        self._parts.append(_U64.pack(v))

    def f64(self, v: float) -> None:
        self._parts.append(_F64.pack(v))

    def string(self, s: str | bytes) -> None:
        data = s.encode() if isinstance(s, str) else bytes(s)
        self.u64(len(data))
        self._parts.append(data)

    def string_vector(self, items) -> None:
        items = list(items)
        self.u64(len(items))
        for s in items:
            self.string(s)

    def i64_vector(self, items) -> None:
        items = list(items)
        self.u64(len(items))
        self._parts.append(struct.pack(f"<{len(items)}q", *items))

    def u64_vector(self, items) -> None:
        items = list(items)
        self.u64(len(items))
        self._parts.append(struct.pack(f"<{len(items)}Q", *items))

    def device(self, device_type: int, device_id: int) -> None:
        self.i32(device_type)
        self.i32(device_id)

    def dtype(self, code: int, bits: int, lanes: int) -> None:
        self.u8(code)
        self.u8(bits)
        self.u16(lanes)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class BinaryReader:
    """Reads fields from ``data`` starting at ``offset``; every read is bounds-checked.

    ``what`` names the format in error messages (e.g. ``"params blob"``).
    """

    def __init__(self, data: bytes | bytearray | memoryview, offset: int = 0, what: str = "data"):
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TVMError(f"{what}: expected bytes, got {type(data).__name__}")
        self.data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self.offset = offset
        self.what = what

    @property
    def remaining(self) -> int:
        return len(self.data) - self.offset

    def _take(self, n: int, field: str) -> bytes:
        if n < 0 or n > self.remaining:
            raise TVMError(
                f"{self.what} is truncated or corrupt: {field} needs {n} bytes at offset "
                f"{self.offset}, but only {self.remaining} remain"
            )
        start = self.offset
        self.offset += n
        return bytes(self.data[start : start + n])

    def raw(self, n: int, field: str = "raw bytes") -> bytes:
        return self._take(n, field)

    def u8(self, field: str = "u8") -> int:
        return _U8.unpack(self._take(1, field))[0]

    def u16(self, field: str = "u16") -> int:
        return _U16.unpack(self._take(2, field))[0]

    def i32(self, field: str = "i32") -> int:
        return _I32.unpack(self._take(4, field))[0]

    def u32(self, field: str = "u32") -> int:
        return _U32.unpack(self._take(4, field))[0]

    def i64(self, field: str = "i64") -> int:
        return _I64.unpack(self._take(8, field))[0]

    def u64(self, field: str = "u64") -> int:
        return _U64.unpack(self._take(8, field))[0]

    def f64(self, field: str = "f64") -> float:
        return _F64.unpack(self._take(8, field))[0]

    def count(self, elem_size: int, field: str) -> int:
        """A u64 element count, checked against the bytes left (``elem_size`` ≥ 1 each)."""
        n = self.u64(f"{field} count")
        if n * max(elem_size, 1) > self.remaining:
            raise TVMError(
                f"{self.what} is truncated or corrupt: {field} claims {n} elements of at least "
                f"{elem_size} bytes at offset {self.offset}, but only {self.remaining} bytes remain"
            )
        return n

    def string_bytes(self, field: str = "string") -> bytes:
        n = self.u64(f"{field} length")
        return self._take(n, field)

    def string(self, field: str = "string") -> str:
        raw = self.string_bytes(field)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise TVMError(f"{self.what} is corrupt: {field} is not valid UTF-8") from None

    def string_vector(self, field: str = "string list") -> list[str]:
        n = self.count(8, field)
        return [self.string(f"{field}[{i}]") for i in range(n)]

    def i64_vector(self, field: str = "i64 list") -> list[int]:
        n = self.count(8, field)
        return list(struct.unpack(f"<{n}q", self._take(8 * n, field)))

    def u64_vector(self, field: str = "u64 list") -> list[int]:
        n = self.count(8, field)
        return list(struct.unpack(f"<{n}Q", self._take(8 * n, field)))

    def device(self, field: str = "device") -> tuple[int, int]:
        return self.i32(f"{field}.device_type"), self.i32(f"{field}.device_id")

    def dtype(self, field: str = "dtype") -> tuple[int, int, int]:
        return self.u8(f"{field}.code"), self.u8(f"{field}.bits"), self.u16(f"{field}.lanes")

    def expect_end(self) -> None:
        if self.remaining:
            raise TVMError(f"{self.what} is corrupt: {self.remaining} unexpected trailing bytes")
