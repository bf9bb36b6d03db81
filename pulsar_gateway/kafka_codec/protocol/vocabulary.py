"""The construct vocabulary messages.py is written in: classes for Kafka's types (compact
and nullable strings, arrays, tagged-field sections), because construct's own classes know
nothing of them and their compiled forms do not check for short reads.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from io import BytesIO
from typing import Any

import construct

from pulsar_gateway.kafka_codec.protocol.wire_types import (
    _F64,
    _I8,
    _I16,
    _I32,
    _I64,
    _U8,
    _U16,
    _U32,
    ZERO_UUID,
    KafkaDecodeError,
    KafkaEncodeError,
    _as_view,
    _read,
    _read_blob,
    _read_bytes,
    _read_count,
    _read_str,
    _read_uuid,
    _read_uvarint,
    _Reader,
    _write_blob,
    _write_length,
    _write_null,
    _write_str,
    _write_tagged,
    _write_uuid,
)

# path of an error) and _emitparse/_emitbuild, so that Construct.compile() inlines whole messages
# into straight-line Python. Parsing always runs on a _Reader, building on a BytesIO.

_RUNTIME_IMPORT = (
    f"from {_Reader.__module__} import (_read, _read_uvarint, _read_length, _read_count, "
    "_read_str, _read_bytes, "
    "_read_blob, _read_uuid, _read_ints, _skip_tagged, _write_uvarint, _write_length, "
    "_write_null, _write_str, _write_blob, _write_uuid, _write_tagged, KafkaDecodeError, "
    "ZERO_UUID, _I8, _U8, _I16, _U16, _I32, _U32, _I64, _F64)"
)


class KafkaConstruct(construct.Construct):
    """Base of the vocabulary: ``default`` is what a missing dict entry encodes as.

    ``min_size`` is the fewest bytes any value of the type takes on the wire (a null or empty
    one); arrays use their entry type's to refuse counts the message cannot hold.
    """

    default: Any = None
    min_size = 0

    def parse(self, data: bytes | memoryview, **contextkw: Any) -> Any:
        """Parse bytes (for debugging; the codec calls the compiled form)."""
        return self._parse(_Reader(_as_view(data)), None, "(parsing)")

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        return self._emit_read()

    def _emitbuild(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        return self._emit_write()

    def _emit_read(self) -> str:
        raise NotImplementedError

    def _emit_write(self) -> str:
        raise NotImplementedError


class Fixed(KafkaConstruct):
    """A fixed-width number: int8..int64, uint16, uint32, float64."""

    def __init__(self, name: str, fmt: struct.Struct, default: int | float = 0) -> None:
        super().__init__()
        self.fmt_name = name
        self.fmt = fmt
        self.default = default
        self.min_size = fmt.size

    def _parse(self, stream: _Reader, context: Any, path: str) -> Any:
        return _read(stream, self.fmt)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        stream.write(self.fmt.pack(obj))
        return obj

    def _sizeof(self, context: Any, path: str) -> int:
        return self.fmt.size

    def _emit_read(self) -> str:
        return f"_read(io, {self.fmt_name})"

    def _emit_write(self) -> str:
        return f"io.write({self.fmt_name}.pack(obj))"


class BoolField(KafkaConstruct):
    """One byte; any non-zero value reads as true, like Kafka's readByte() != 0."""

    default = False
    min_size = 1

    def _parse(self, stream: _Reader, context: Any, path: str) -> bool:
        return _read(stream, _U8) != 0

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        stream.write(b"\x01" if obj else b"\x00")
        return obj

    def _emit_read(self) -> str:
        return "(_read(io, _U8) != 0)"

    def _emit_write(self) -> str:
        return "io.write(b'\\x01' if obj else b'\\x00')"


class UuidField(KafkaConstruct):
    """16 bytes, decoded to uuid.UUID; encodes a UUID or 16 bytes."""

    default = ZERO_UUID
    min_size = 16

    def _parse(self, stream: _Reader, context: Any, path: str) -> uuid.UUID:
        return _read_uuid(stream)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        _write_uuid(stream, obj)
        return obj

    def _emit_read(self) -> str:
        return "_read_uuid(io)"

    def _emit_write(self) -> str:
        return "_write_uuid(io, obj)"


class StringField(KafkaConstruct):
    """UTF-8 string: int16 length, or unsigned varint length+1 when compact; null is -1 / 0."""

    def __init__(self, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.compact = compact
        self.nullable = nullable
        self.default = None if nullable else ""
        self.min_size = 1 if compact else 2

    def _parse(self, stream: _Reader, context: Any, path: str) -> str | None:
        return _read_str(stream, self.compact, self.nullable)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        _write_str(stream, obj, self.compact, self.nullable)
        return obj

    def _emit_read(self) -> str:
        return f"_read_str(io, {self.compact}, {self.nullable})"

    def _emit_write(self) -> str:
        return f"_write_str(io, obj, {self.compact}, {self.nullable})"


class BytesField(KafkaConstruct):
    """Bytes (int32 or compact length); ``records`` decode to a view of the input, not a copy."""

    def __init__(self, compact: bool, nullable: bool, records: bool = False) -> None:
        super().__init__()
        self.compact = compact
        self.nullable = nullable
        self.records = records
        self.default = None if nullable else b""
        self.min_size = 1 if compact else 4
        self._reader = _read_blob if records else _read_bytes

    def _parse(self, stream: _Reader, context: Any, path: str) -> Any:
        return self._reader(stream, self.compact, self.nullable)

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        _write_blob(stream, obj, self.compact, self.nullable)
        return obj

    def _emit_read(self) -> str:
        return f"{self._reader.__name__}(io, {self.compact}, {self.nullable})"

    def _emit_write(self) -> str:
        return f"_write_blob(io, obj, {self.compact}, {self.nullable})"


_INT_CODES = {"_I8": "b", "_I16": "h", "_I32": "i", "_I64": "q", "_U16": "H", "_U32": "I"}


class ArrayField(KafkaConstruct):
    """Array: int32 count, or unsigned varint count+1 when compact; null is -1 / 0."""

    def __init__(self, subcon: construct.Construct, compact: bool, nullable: bool) -> None:
        super().__init__()
        self.subcon = subcon
        self.compact = compact
        self.nullable = nullable
        self.default = None if nullable else []
        self.min_size = 1 if compact else 4
        # an entry of no bytes (an empty struct) still counts one, as in Kafka's own check
        self.entry_size = max(1, subcon.min_size)

    def _parse(self, stream: _Reader, context: Any, path: str) -> list[Any] | None:
        n = _read_count(stream, self.compact, self.nullable, self.entry_size)
        if n < 0:
            return None
        return [self.subcon._parse(stream, context, path) for _ in range(n)]

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            _write_null(stream, self.nullable, self.compact, True)
            return obj
        _write_length(stream, len(obj), self.compact, True)
        for i, item in enumerate(obj):
            _build_reporting(self.subcon, item, stream, f"{path}[{i}]")
        return obj

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        sub = self.subcon
        if isinstance(sub, Fixed) and sub.fmt_name in _INT_CODES:
            items = f"_read_ints(io, n, {_INT_CODES[sub.fmt_name]!r})"
        else:
            items = f"[{sub._compileparse(code)} for _ in range(n)]"
        name = f"parse_kafka_array_{code.allocateId()}"
        code.append(
            f"def {name}(io, this):\n"
            f"    n = _read_count(io, {self.compact}, {self.nullable}, {self.entry_size})\n"
            f"    return None if n < 0 else {items}\n"
        )
        return f"{name}(io, this)"

    def _emitbuild(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        name = f"build_kafka_array_{code.allocateId()}"
        code.append(
            f"def {name}(obj, io, this):\n"
            f"    if obj is None:\n"
            f"        return _write_null(io, {self.nullable}, {self.compact}, True)\n"
            f"    _write_length(io, len(obj), {self.compact}, True)\n"
            f"    for obj in obj:\n"
            f"        {self.subcon._compilebuild(code)}\n"
        )
        return f"{name}(obj, io, this)"


class NullableStructField(KafkaConstruct):
    """A struct that may be null: an int8 marker (-1 null, 1 present), uvarint when tagged."""

    def __init__(self, subcon: construct.Construct, tagged: bool = False) -> None:
        super().__init__()
        self.subcon = subcon
        self.tagged = tagged
        self.min_size = 1  # the null marker

    def _parse(self, stream: _Reader, context: Any, path: str) -> Any:
        present = _read_uvarint(stream) > 0 if self.tagged else _read(stream, _I8) >= 0
        return self.subcon._parse(stream, context, path) if present else None

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if obj is None:
            stream.write(b"\x00" if self.tagged else b"\xff")
        else:
            stream.write(b"\x01")
            self.subcon._build(obj, stream, context, path)
        return obj

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        marker = "_read_uvarint(io) > 0" if self.tagged else "_read(io, _I8) >= 0"
        return f"({self.subcon._compileparse(code)} if {marker} else None)"

    def _emitbuild(self, code: construct.CodeGen) -> str:
        null = "b'\\x00'" if self.tagged else "b'\\xff'"
        sub = self.subcon._compilebuild(code)
        return f"(io.write({null}) if obj is None else (io.write(b'\\x01'), {sub}))"


class Tagged:
    """Marks a KafkaStruct member as a tagged field with this tag (flexible versions only)."""

    def __init__(self, tag: int, member: construct.Renamed) -> None:
        self.tag = tag
        self.member = member


def _unwrap(member: construct.Renamed) -> tuple[str, construct.Construct, Any]:
    """``"name" / Default(sub, value)`` -> (name, sub, value); the value defaults to sub's."""
    sub = member.subcon
    if isinstance(sub, construct.Default):
        return member.name, sub.subcon, sub.value
    return member.name, sub, sub.default


def _literal(value: Any) -> str:
    """Python source for a default value in compiled code."""
    if value is ZERO_UUID:
        return "ZERO_UUID"
    if isinstance(value, list | dict) and not value:
        return repr(value)
    if value is None or isinstance(value, bool | int | float | str | bytes):
        return repr(value)
    raise ValueError(f"no literal for default {value!r}")


def _build_reporting(sub: construct.Construct, value: Any, stream: BytesIO, path: str) -> None:
    """Uncompiled build of one member; failures become KafkaEncodeError naming the path."""
    try:
        sub._build(value, stream, None, path)
    except KafkaEncodeError:
        raise
    except Exception as exc:
        raise KafkaEncodeError(f"{path}: {exc}") from exc


class KafkaStruct(KafkaConstruct):
    """Fields in order, then (flexible versions) the tagged-field section.

    Members are ``"name" / construct`` or ``Tagged(tag, "name" / construct)``; construct's
    ``Default`` gives a spec default. Missing or None entries encode as the default.
    """

    def __init__(self, *members: construct.Renamed | Tagged, flexible: bool = False) -> None:
        super().__init__()
        self.flexible = flexible
        self.fields = [_unwrap(m) for m in members if not isinstance(m, Tagged)]
        tagged = sorted((m.tag, _unwrap(m.member)) for m in members if isinstance(m, Tagged))
        self.tagged = {tag: (name, sub) for tag, (name, sub, _) in tagged}
        if self.tagged and not flexible:
            raise ValueError("tagged fields need a flexible version")
        self.default = {}
        # tagged fields are optional; the tagged section's count is one byte at least
        self.min_size = sum(sub.min_size for _, sub, _ in self.fields) + int(flexible)

    def _parse(self, stream: _Reader, context: Any, path: str) -> dict[str, Any]:
        result = {}
        for name, sub, _ in self.fields:
            result[name] = sub._parse(stream, context, path)
        if self.flexible:
            for _ in range(_read_uvarint(stream)):
                tag = _read_uvarint(stream)
                end = _read_uvarint(stream) + stream.pos
                if end > len(stream.buf):
                    raise KafkaDecodeError("tagged field overruns the message")
                if tag in self.tagged:
                    name, sub = self.tagged[tag]
                    result[name] = sub._parse(stream, context, path)
                    if stream.pos > end:
                        raise KafkaDecodeError(f"tagged field {name} overruns its size")
                stream.pos = end
        return result

    def _build(self, obj: Any, stream: BytesIO, context: Any, path: str) -> Any:
        if not isinstance(obj, Mapping):
            raise KafkaEncodeError(f"{path}: expected a dict, got {type(obj).__name__}")
        for name, sub, default in self.fields:
            value = obj.get(name)
            _build_reporting(sub, default if value is None else value, stream, f"{path}.{name}")
        if self.flexible:
            tags = []
            for tag, (name, sub) in self.tagged.items():
                value = obj.get(name)
                if value is not None:
                    buffer = BytesIO()
                    _build_reporting(sub, value, buffer, f"{path}.{name}")
                    tags.append((tag, buffer.getvalue()))
            _write_tagged(stream, tags)
        return obj

    def _emitparse(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        name = f"parse_kafka_struct_{code.allocateId()}"
        lines = [f"def {name}(io, this):", "    result = {}"]
        for field, sub, _ in self.fields:
            lines.append(f"    result[{field!r}] = {sub._compileparse(code)}")
        if self.flexible and not self.tagged:
            lines.append("    _skip_tagged(io)")
        elif self.flexible:
            lines += [
                "    for _ in range(_read_uvarint(io)):",
                "        tag = _read_uvarint(io)",
                "        end = _read_uvarint(io) + io.pos",
                "        if end > len(io.buf):",
                "            raise KafkaDecodeError('tagged field overruns the message')",
            ]
            for i, (tag, (field, sub)) in enumerate(self.tagged.items()):
                lines += [
                    f"        {'elif' if i else 'if'} tag == {tag}:",
                    f"            result[{field!r}] = {sub._compileparse(code)}",
                    "            if io.pos > end:",
                    f"                raise KafkaDecodeError('tagged {field} overruns its size')",
                ]
            lines.append("        io.pos = end")
        lines.append("    return result")
        code.append("\n".join(lines) + "\n")
        return f"{name}(io, this)"

    def _emitbuild(self, code: construct.CodeGen) -> str:
        code.append(_RUNTIME_IMPORT)
        name = f"build_kafka_struct_{code.allocateId()}"
        lines = [f"def {name}(obj, io, this):", "    objdict = obj"]
        for field, sub, default in self.fields:
            lines.append(f"    obj = objdict.get({field!r})")
            if default is not None:
                lines.append(f"    if obj is None: obj = {_literal(default)}")
            lines.append(f"    {sub._compilebuild(code)}")
        if self.flexible and not self.tagged:
            lines.append("    io.write(b'\\x00')")
        elif self.flexible:
            lines.append("    tags = []")
            for tag, (field, sub) in self.tagged.items():
                lines += [
                    f"    obj = objdict.get({field!r})",
                    "    if obj is not None:",
                    "        outer, io = io, BytesIO()",
                    f"        {sub._compilebuild(code)}",
                    f"        tags.append(({tag}, io.getvalue()))",
                    "        io = outer",
                ]
            lines.append("    _write_tagged(io, tags)")
        lines.append("    return objdict")
        code.append("\n".join(lines) + "\n")
        return f"{name}(obj, io, this)"


Bool = BoolField()
Int8 = Fixed("_I8", _I8)
Int16 = Fixed("_I16", _I16)
Uint16 = Fixed("_U16", _U16)
Int32 = Fixed("_I32", _I32)
Uint32 = Fixed("_U32", _U32)
Int64 = Fixed("_I64", _I64)
Float64 = Fixed("_F64", _F64, 0.0)
Uuid = UuidField()
String = StringField(compact=False, nullable=False)
NullableString = StringField(compact=False, nullable=True)
CompactString = StringField(compact=True, nullable=False)
CompactNullableString = StringField(compact=True, nullable=True)
Bytes = BytesField(compact=False, nullable=False)
NullableBytes = BytesField(compact=False, nullable=True)
CompactBytes = BytesField(compact=True, nullable=False)
CompactNullableBytes = BytesField(compact=True, nullable=True)
Records = BytesField(compact=False, nullable=False, records=True)
NullableRecords = BytesField(compact=False, nullable=True, records=True)
CompactRecords = BytesField(compact=True, nullable=False, records=True)
CompactNullableRecords = BytesField(compact=True, nullable=True, records=True)


def _array_kind(compact: bool, nullable: bool) -> Callable[[construct.Construct], ArrayField]:
    def make(subcon: construct.Construct) -> ArrayField:
        return ArrayField(subcon, compact, nullable)

    return make


Array = _array_kind(compact=False, nullable=False)
NullableArray = _array_kind(compact=False, nullable=True)
CompactArray = _array_kind(compact=True, nullable=False)
CompactNullableArray = _array_kind(compact=True, nullable=True)
