"""A hand-written proto3 wire-format codec for the Chakra execution-trace schema.

Written from ``schema/protobuf/et_def.proto`` of mlcommons/chakra (package ``ChakraProtoMsg``); no compiled
protobuf dependency.  Covered messages: ``GlobalMetadata``, ``Node``, ``IOInfo`` and ``AttributeProto`` with
every kind of its ``value`` oneof (the 16 scalar kinds and their ``*List`` wrapper messages).

Wire format (protobuf encoding spec): every field is a key ``(field_number << 3) | wire_type`` as a varint,
then the value: wire type 0 varint (int32/int64/uint32/uint64/bool/enum; sint32/sint64 zigzag-encoded),
1 little-endian 8 bytes (double/fixed64/sfixed64), 2 a varint length and that many bytes (string, bytes,
sub-messages, packed repeated scalars), 5 little-endian 4 bytes (float/fixed32/sfixed32).  Negative int32
and int64 values are sign-extended to 64 bits (ten-byte varints).

Decoding follows the proto3 rules: absent scalars read as their default, repeated scalars are accepted both
packed and unpacked, unknown fields are skipped, and of several members of a oneof the last one wins.
Anything malformed (truncated varint or field, a wire type that does not match the schema, a varint longer
than ten bytes, invalid UTF-8 in a string) raises :class:`~simfuse.errors.SpecError`.

Encoding writes the canonical form: fields in field-number order, proto3 defaults of singular fields
omitted, oneof members and sub-messages written whenever set, repeated numeric fields packed.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from ...errors import SpecError

# ----------------------------------------------------------------------------------------------- enums


class NodeType(IntEnum):
    INVALID_NODE = 0
    METADATA_NODE = 1
    MEM_LOAD_NODE = 2
    MEM_STORE_NODE = 3
    COMP_NODE = 4
    COMM_SEND_NODE = 5
    COMM_RECV_NODE = 6
    COMM_COLL_NODE = 7


class CollectiveCommType(IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


# ------------------------------------------------------------------------------------------- wire types

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
_U64 = (1 << 64) - 1


def zigzag_encode(value: int, bits: int = 64) -> int:
    """Signed -> unsigned as protobuf's sint32/sint64 (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...)."""
    return ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)


def zigzag_decode(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def encode_varint(value: int) -> bytes:
    """Base-128 varint of an unsigned value below 2**64 (callers sign-extend negative int32/int64)."""
    if value < 0 or value > _U64:
        raise ValueError(f"varint out of range: {value}")
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(0x80 | bits)
        else:
            out.append(bits)
            return bytes(out)


class Reader:
    """A cursor over one message's bytes; errors name ``source`` and the message being read."""

    def __init__(self, data: bytes, source: str = "<bytes>", where: str = "", offset: int = 0):
        self.data = data
        self.pos = 0
        self.source = source
        self.where = where
        self.offset = offset  # of data[0] in the file, for error messages

    def error(self, message: str, field_name: str = "") -> SpecError:
        at = f"{self.where}.{field_name}" if field_name else self.where
        return SpecError(self.source, at, f"{message} (at byte {self.offset + self.pos})")

    def at_end(self) -> bool:
        return self.pos >= len(self.data)

    def varint(self, field_name: str = "") -> int:
        result = shift = 0
        data, n = self.data, len(self.data)
        start = self.pos
        while True:
            if self.pos >= n:
                self.pos = start
                raise self.error("truncated varint", field_name)
            b = data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift >= 70:
                self.pos = start
                raise self.error("varint longer than 10 bytes", field_name)
        if result > _U64:
            self.pos = start
            raise self.error("varint overflows 64 bits", field_name)
        return result

    def take(self, size: int, field_name: str = "") -> bytes:
        if size > len(self.data) - self.pos:
            raise self.error(f"truncated field: {size} bytes announced, {len(self.data) - self.pos} left",
                             field_name)
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out

    def key(self) -> tuple[int, int]:
        k = self.varint("<key>")
        number, wire = k >> 3, k & 7
        if number == 0:
            raise self.error("field number 0 is invalid")
        if wire in (6, 7):
            raise self.error(f"invalid wire type {wire} for field {number}")
        return number, wire

    def length_delimited(self, field_name: str = "") -> tuple[bytes, int]:
        """The payload of a LEN field and its offset in the file."""
        size = self.varint(field_name)
        at = self.offset + self.pos
        return self.take(size, field_name), at

    def skip(self, number: int, wire: int) -> None:
        if wire == VARINT:
            self.varint(f"<field {number}>")
        elif wire == I64:
            self.take(8, f"<field {number}>")
        elif wire == I32:
            self.take(4, f"<field {number}>")
        elif wire == LEN:
            self.length_delimited(f"<field {number}>")
        else:
            raise self.error(f"unsupported group wire type {wire} for unknown field {number}")

    def sub(self, data: bytes, at: int, where: str) -> Reader:
        return Reader(data, self.source, where, at)


# ------------------------------------------------------------------------------------------ scalars
# Each scalar type: (wire type, encode(value) -> bytes, decode(reader, field) -> value, check(value)).


def _int_range(lo: int, hi: int):
    def check(v: Any) -> None:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"expected an integer in [{lo}, {hi}], got {v!r}")

    return check


def _signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _check_float(v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a number, got {v!r}")


def _check_float32(v: Any) -> None:
    _check_float(v)
    if math.isfinite(v) and abs(v) > 3.4028234663852886e38:
        raise ValueError(f"{v!r} does not fit a float32")


def _check_bool(v: Any) -> None:
    if not isinstance(v, bool):
        raise ValueError(f"expected a bool, got {v!r}")


def _check_str(v: Any) -> None:
    if not isinstance(v, str):
        raise ValueError(f"expected a str, got {v!r}")


def _check_bytes(v: Any) -> None:
    if not isinstance(v, (bytes, bytearray)):
        raise ValueError(f"expected bytes, got {v!r}")


def _utf8(r: Reader, data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise r.error(f"invalid UTF-8 in string: {e.reason}", name) from None


I32_MIN, I32_MAX, I64_MIN, I64_MAX = -(1 << 31), (1 << 31) - 1, -(1 << 63), (1 << 63) - 1

SCALARS: dict[str, tuple[int, Any, Any, Any]] = {
    "double": (I64, lambda v: struct.pack("<d", v), lambda r, n: struct.unpack("<d", r.take(8, n))[0],
               _check_float),
    "float": (I32, lambda v: struct.pack("<f", v), lambda r, n: struct.unpack("<f", r.take(4, n))[0],
              _check_float32),
    "int32": (VARINT, lambda v: encode_varint(v & _U64), lambda r, n: _signed(r.varint(n), 32),
              _int_range(I32_MIN, I32_MAX)),
    "int64": (VARINT, lambda v: encode_varint(v & _U64), lambda r, n: _signed(r.varint(n), 64),
              _int_range(I64_MIN, I64_MAX)),
    "uint32": (VARINT, encode_varint, lambda r, n: r.varint(n) & 0xFFFFFFFF, _int_range(0, (1 << 32) - 1)),
    "uint64": (VARINT, encode_varint, lambda r, n: r.varint(n), _int_range(0, _U64)),
    "sint32": (VARINT, lambda v: encode_varint(zigzag_encode(v, 32)),
               lambda r, n: zigzag_decode(r.varint(n) & 0xFFFFFFFF), _int_range(I32_MIN, I32_MAX)),
    "sint64": (VARINT, lambda v: encode_varint(zigzag_encode(v, 64)), lambda r, n: zigzag_decode(r.varint(n)),
               _int_range(I64_MIN, I64_MAX)),
    "fixed32": (I32, lambda v: struct.pack("<I", v), lambda r, n: struct.unpack("<I", r.take(4, n))[0],
                _int_range(0, (1 << 32) - 1)),
    "fixed64": (I64, lambda v: struct.pack("<Q", v), lambda r, n: struct.unpack("<Q", r.take(8, n))[0],
                _int_range(0, _U64)),
    "sfixed32": (I32, lambda v: struct.pack("<i", v), lambda r, n: struct.unpack("<i", r.take(4, n))[0],
                 _int_range(I32_MIN, I32_MAX)),
    "sfixed64": (I64, lambda v: struct.pack("<q", v), lambda r, n: struct.unpack("<q", r.take(8, n))[0],
                 _int_range(I64_MIN, I64_MAX)),
    "bool": (VARINT, lambda v: b"\x01" if v else b"\x00", lambda r, n: r.varint(n) != 0, _check_bool),
    "string": (LEN, lambda v: v.encode("utf-8"), None, _check_str),
    "bytes": (LEN, bytes, None, _check_bytes),
}
#: The scalar kinds in the order of AttributeProto's oneof: ``<kind>_val`` is field 3 + 2i, ``<kind>_list``
#: (a ``<Kind>List`` message with ``repeated <kind> values = 1``) is field 4 + 2i.
SCALAR_ORDER = ("double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32",
                "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes")
#: Every member of AttributeProto's ``value`` oneof -> field number.
ATTR_KINDS: dict[str, int] = {}
for _i, _t in enumerate(SCALAR_ORDER):
    ATTR_KINDS[f"{_t}_val"] = 3 + 2 * _i
    ATTR_KINDS[f"{_t}_list"] = 4 + 2 * _i
_KIND_BY_FIELD = {v: k for k, v in ATTR_KINDS.items()}


def _key(number: int, wire: int) -> bytes:
    return encode_varint((number << 3) | wire)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, LEN) + encode_varint(len(payload)) + payload


def encode_scalar(number: int, stype: str, value: Any) -> bytes:
    wire, enc, _dec, _chk = SCALARS[stype]
    if wire == LEN:
        return _len_field(number, enc(value))
    return _key(number, wire) + enc(value)


def encode_repeated(number: int, stype: str, values: list) -> bytes:
    """A repeated field: packed for numeric types, one entry per value for string/bytes."""
    wire, enc, _dec, _chk = SCALARS[stype]
    if wire == LEN:
        return b"".join(_len_field(number, enc(v)) for v in values)
    if not values:
        return b""
    return _len_field(number, b"".join(enc(v) for v in values))


def decode_scalar(r: Reader, wire: int, stype: str, name: str) -> Any:
    want, _enc, dec, _chk = SCALARS[stype]
    if wire != want:
        raise r.error(f"wire type {wire} does not match the schema's {stype} (wire type {want})", name)
    if want == LEN:
        data, _at = r.length_delimited(name)
        return _utf8(r, data, name) if stype == "string" else bytes(data)
    return dec(r, name)


def decode_repeated_into(r: Reader, wire: int, stype: str, name: str, out: list) -> None:
    """One occurrence of a repeated field (packed or not) appended to ``out``."""
    want = SCALARS[stype][0]
    if wire == LEN and want != LEN:  # packed
        data, at = r.length_delimited(name)
        sub = r.sub(data, at, f"{r.where}.{name}")
        dec = SCALARS[stype][2]
        while not sub.at_end():
            out.append(dec(sub, "[]"))
        return
    out.append(decode_scalar(r, wire, stype, name))


# --------------------------------------------------------------------------------------------- messages


@dataclass
class AttributeProto:
    """``AttributeProto``: a name and one value; ``kind`` names the oneof member (``int64_val``, ``bool_list``
    ...; None when no member is set).  List kinds carry a Python list."""

    name: str = ""
    kind: str | None = None
    value: Any = None
    doc_string: str = ""

    def check(self) -> None:
        """Raises ValueError unless ``value`` fits ``kind``."""
        if self.kind is None:
            return
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")
        stype, _, shape = self.kind.rpartition("_")
        chk = SCALARS[stype][3]
        if shape == "list":
            if not isinstance(self.value, (list, tuple)):
                raise ValueError(f"{self.kind} needs a list, got {self.value!r}")
            for v in self.value:
                chk(v)
        else:
            chk(self.value)


@dataclass
class IOInfo:
    values: str = ""
    shapes: str = ""
    types: str = ""


@dataclass
class GlobalMetadata:
    version: str = ""
    attr: list[AttributeProto] = field(default_factory=list)


@dataclass
class Node:
    id: int = 0
    name: str = ""
    type: int = NodeType.INVALID_NODE
    ctrl_deps: list[int] = field(default_factory=list)
    data_deps: list[int] = field(default_factory=list)
    start_time_micros: int = 0
    duration_micros: int = 0
    inputs: IOInfo | None = None
    outputs: IOInfo | None = None
    attr: list[AttributeProto] = field(default_factory=list)

    def attrs(self) -> dict[str, AttributeProto]:
        """Attributes by name (the last one of a repeated name)."""
        return {a.name: a for a in self.attr}


def _checked(where: str, fn, *args):
    try:
        return fn(*args)
    except (ValueError, TypeError, struct.error, OverflowError) as e:
        raise SpecError("<encode>", where, str(e)) from None


def encode_attribute(a: AttributeProto) -> bytes:
    _checked(f"attr {a.name!r}", a.check)
    out = b""
    if a.name:
        out += encode_scalar(1, "string", a.name)
    if a.doc_string:
        out += encode_scalar(2, "string", a.doc_string)
    if a.kind is not None:
        number = ATTR_KINDS[a.kind]
        stype, _, shape = a.kind.rpartition("_")
        if shape == "list":
            out += _len_field(number, encode_repeated(1, stype, list(a.value)))
        else:  # oneof members have presence: written even when they hold the default
            out += encode_scalar(number, stype, a.value)
    return out


def decode_attribute(r: Reader) -> AttributeProto:
    a = AttributeProto()
    while not r.at_end():
        number, wire = r.key()
        if number == 1:
            a.name = decode_scalar(r, wire, "string", "name")
        elif number == 2:
            a.doc_string = decode_scalar(r, wire, "string", "doc_string")
        elif number in _KIND_BY_FIELD:
            kind = _KIND_BY_FIELD[number]
            stype, _, shape = kind.rpartition("_")
            if shape == "list":
                if wire != LEN:
                    raise r.error(f"wire type {wire} for message field {kind}", kind)
                data, at = r.length_delimited(kind)
                sub = r.sub(data, at, f"{r.where}.{kind}")
                values: list = []
                while not sub.at_end():
                    n, w = sub.key()
                    if n == 1:
                        decode_repeated_into(sub, w, stype, "values", values)
                    else:
                        sub.skip(n, w)
                a.kind, a.value = kind, values
            else:
                a.kind, a.value = kind, decode_scalar(r, wire, stype, kind)
        else:
            r.skip(number, wire)
    return a


def _encode_attrs(number: int, attrs: list[AttributeProto]) -> bytes:
    return b"".join(_len_field(number, encode_attribute(a)) for a in attrs)


def encode_global_metadata(m: GlobalMetadata) -> bytes:
    out = encode_scalar(1, "string", m.version) if m.version else b""
    return out + _encode_attrs(2, m.attr)


def _decode_attr_field(r: Reader, wire: int, out: list, index: int) -> None:
    if wire != LEN:
        raise r.error(f"wire type {wire} for message field attr", "attr")
    data, at = r.length_delimited("attr")
    out.append(decode_attribute(r.sub(data, at, f"{r.where}.attr[{index}]")))


def decode_global_metadata(r: Reader) -> GlobalMetadata:
    m = GlobalMetadata()
    while not r.at_end():
        number, wire = r.key()
        if number == 1:
            m.version = decode_scalar(r, wire, "string", "version")
        elif number == 2:
            _decode_attr_field(r, wire, m.attr, len(m.attr))
        else:
            r.skip(number, wire)
    return m


def encode_ioinfo(io: IOInfo) -> bytes:
    out = b""
    for number, value in ((1, io.values), (2, io.shapes), (3, io.types)):
        if value:
            out += encode_scalar(number, "string", value)
    return out


def decode_ioinfo(r: Reader) -> IOInfo:
    io = IOInfo()
    names = {1: "values", 2: "shapes", 3: "types"}
    while not r.at_end():
        number, wire = r.key()
        if number in names:
            setattr(io, names[number], decode_scalar(r, wire, "string", names[number]))
        else:
            r.skip(number, wire)
    return io


def encode_node(n: Node) -> bytes:
    where = f"node {n.id}"
    for fname, stype in (("id", "uint64"), ("start_time_micros", "uint64"), ("duration_micros", "uint64"),
                         ("type", "int32")):
        _checked(f"{where}.{fname}", SCALARS[stype][3], int(getattr(n, fname)))
    for fname in ("ctrl_deps", "data_deps"):
        for d in getattr(n, fname):
            _checked(f"{where}.{fname}", SCALARS["uint64"][3], d)
    _checked(f"{where}.name", _check_str, n.name)
    out = b""
    if n.id:
        out += encode_scalar(1, "uint64", n.id)
    if n.name:
        out += encode_scalar(2, "string", n.name)
    if int(n.type):
        out += encode_scalar(3, "int32", int(n.type))
    out += encode_repeated(4, "uint64", list(n.ctrl_deps))
    out += encode_repeated(5, "uint64", list(n.data_deps))
    if n.start_time_micros:
        out += encode_scalar(6, "uint64", n.start_time_micros)
    if n.duration_micros:
        out += encode_scalar(7, "uint64", n.duration_micros)
    if n.inputs is not None:
        out += _len_field(8, encode_ioinfo(n.inputs))
    if n.outputs is not None:
        out += _len_field(9, encode_ioinfo(n.outputs))
    return out + _encode_attrs(10, n.attr)


def decode_node(r: Reader) -> Node:
    n = Node()
    while not r.at_end():
        number, wire = r.key()
        if number == 1:
            n.id = decode_scalar(r, wire, "uint64", "id")
        elif number == 2:
            n.name = decode_scalar(r, wire, "string", "name")
        elif number == 3:
            n.type = decode_scalar(r, wire, "int32", "type")  # an open enum: unknown values are kept
        elif number == 4:
            decode_repeated_into(r, wire, "uint64", "ctrl_deps", n.ctrl_deps)
        elif number == 5:
            decode_repeated_into(r, wire, "uint64", "data_deps", n.data_deps)
        elif number == 6:
            n.start_time_micros = decode_scalar(r, wire, "uint64", "start_time_micros")
        elif number == 7:
            n.duration_micros = decode_scalar(r, wire, "uint64", "duration_micros")
        elif number in (8, 9):
            fname = "inputs" if number == 8 else "outputs"
            if wire != LEN:
                raise r.error(f"wire type {wire} for message field {fname}", fname)
            data, at = r.length_delimited(fname)
            setattr(n, fname, decode_ioinfo(r.sub(data, at, f"{r.where}.{fname}")))
        elif number == 10:
            _decode_attr_field(r, wire, n.attr, len(n.attr))
        else:
            r.skip(number, wire)
    return n


def parse_node(data: bytes, source: str = "<bytes>", where: str = "Node", offset: int = 0) -> Node:
    return decode_node(Reader(data, source, where, offset))


def parse_global_metadata(data: bytes, source: str = "<bytes>", where: str = "GlobalMetadata",
                          offset: int = 0) -> GlobalMetadata:
    return decode_global_metadata(Reader(data, source, where, offset))


def parse_attribute(data: bytes, source: str = "<bytes>") -> AttributeProto:
    return decode_attribute(Reader(data, source, "AttributeProto"))
