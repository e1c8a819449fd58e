"""Chakra execution traces (MLCommons, the workload format of ASTRA-sim): codec, file framing, converter.

* :mod:`.proto` -- the proto3 wire codec of ``et_def.proto`` (no protobuf dependency);
* :mod:`.io` -- ``<prefix>.<rank>.et`` files: varint-length-delimited GlobalMetadata then Nodes;
* :mod:`.convert` -- :func:`import_et` / :func:`export_et` to and from :mod:`simfuse.graph.ir`.
"""

from .convert import export_et, import_et
from .io import EtFile, decode_et, encode_et, read_et, write_et
from .proto import AttributeProto, CollectiveCommType, GlobalMetadata, IOInfo, Node, NodeType

__all__ = ["AttributeProto", "CollectiveCommType", "EtFile", "GlobalMetadata", "IOInfo", "Node", "NodeType",
           "decode_et", "encode_et", "export_et", "import_et", "read_et", "write_et"]
