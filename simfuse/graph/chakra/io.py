"""Chakra ET file framing: a sequence of varint-length-delimited protobuf messages.

An ET file (``<prefix>.<rank>.et``, one per NPU, as ASTRA-sim's ``--workload-configuration=<prefix>`` reads
them) holds one ``GlobalMetadata`` message and then one ``Node`` message per node, each preceded by its
length as a base-128 varint.  Files may be gzip-compressed (Chakra's reader accepts both); they are
recognised by the gzip magic bytes.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import SpecError
from .proto import (
    GlobalMetadata,
    Node,
    Reader,
    encode_global_metadata,
    encode_node,
    encode_varint,
    parse_global_metadata,
    parse_node,
)

ET_NAME = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")


@dataclass
class EtFile:
    metadata: GlobalMetadata
    nodes: list[Node] = field(default_factory=list)


def iter_frames(data: bytes, source: str = "<bytes>") -> Iterator[tuple[int, bytes]]:
    """(offset, payload) of every length-delimited message in ``data``."""
    r = Reader(data, source, "<frame>")
    index = 0
    while not r.at_end():
        r.where = f"message[{index}]"
        size = r.varint("length")
        at = r.pos
        if size > len(data) - at:
            raise SpecError(source, f"message[{index}]",
                            f"truncated message: length prefix says {size} bytes, {len(data) - at} left "
                            f"(at byte {at})")
        yield at, data[at:at + size]
        r.pos = at + size
        index += 1


def _maybe_gunzip(data: bytes, source: str) -> bytes:
    """``data`` decompressed when it is gzip, within the ``chakra`` limits of :mod:`simfuse.io_limits`."""
    if data[:2] != b"\x1f\x8b":
        return data
    from ...io_limits import LIMITS, MAX_GZIP_RATIO

    limit = min(LIMITS["chakra"][1], max(8 << 20, MAX_GZIP_RATIO * len(data)))
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            out = fh.read(limit + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise SpecError(source, "", f"corrupt gzip stream: {e}") from None
    if len(out) > limit:
        raise SpecError(source, "", f"gzip stream inflates to more than {limit} bytes: refusing a decompression "
                        "bomb")
    return out


def decode_et(data: bytes, source: str = "<bytes>") -> EtFile:
    data = _maybe_gunzip(bytes(data), source)
    frames = iter_frames(data, source)
    first = next(frames, None)
    if first is None:
        raise SpecError(source, "GlobalMetadata", "empty file: a Chakra ET starts with a GlobalMetadata message")
    at, payload = first
    et = EtFile(parse_global_metadata(payload, source, "GlobalMetadata", at))
    for i, (at, payload) in enumerate(frames, start=1):
        et.nodes.append(parse_node(payload, source, f"node[{i - 1}]", at))
    return et


def read_et(path: str | Path) -> EtFile:
    """All messages of one ET file."""
    from ...io_limits import read_bytes

    path = Path(path)
    # a regular file within the size limits; gzip is decompressed there (ratio capped)
    return decode_et(read_bytes(path, "chakra", what="Chakra ET file"), str(path))


def encode_et(metadata: GlobalMetadata, nodes: Iterable[Node]) -> bytes:
    out = bytearray()
    for payload in [encode_global_metadata(metadata), *(encode_node(n) for n in nodes)]:
        out += encode_varint(len(payload))
        out += payload
    return bytes(out)


def write_et(path: str | Path, metadata: GlobalMetadata, nodes: Iterable[Node], *, compress: bool = False) -> Path:
    """Writes one ET file (gzip-compressed when ``compress``, with a fixed mtime: byte-for-byte reproducible)."""
    path = Path(path)
    data = encode_et(metadata, nodes)
    if compress:
        data = gzip.compress(data, mtime=0)
    from ...results.io import atomic_write

    return atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
