"""Regenerates tests/data/chakra/et_generator/: Chakra's et_generator examples rebuilt with simfuse's writer.

mlcommons/chakra ``src/generator/generator.py`` writes, for each example and NPU, ``<example>.<npu>.et``: a
``GlobalMetadata(version="1.0.0")`` and the example's nodes; node ids come from one counter shared by every
file the run writes.  Here each example is rebuilt as if it ran first (the counter starts at 0), for 2 NPUs,
with the generator's defaults (runtime 5 us, tensor size 1024, comm size 65536).

    PYTHONPATH=. python tests/data/chakra/make_fixtures.py
"""

from __future__ import annotations

from pathlib import Path

from simfuse.graph.chakra.io import write_et
from simfuse.graph.chakra.proto import AttributeProto, CollectiveCommType, GlobalMetadata, Node, NodeType

OUT = Path(__file__).resolve().parent / "et_generator"
NUM_NPUS, RUNTIME, TENSOR_SIZE, COMM_SIZE = 2, 5, 1024, 65536


def attr(name, kind, value, doc=""):
    return AttributeProto(name=name, kind=kind, value=value, doc_string=doc)


class Counter:
    def __init__(self):
        self.next = 0

    def node(self, name, ntype):
        n = Node(id=self.next, name=name, type=ntype)
        self.next += 1
        return n


def write(example, per_npu):
    ids = Counter()
    for npu in range(NUM_NPUS):
        write_et(OUT / f"{example}.{npu}.et", GlobalMetadata(version="1.0.0"), per_npu(ids))


def one_comp_node(ids):
    n = ids.node("COMP_NODE", NodeType.COMP_NODE)
    n.attr.append(attr("is_cpu_op", "bool_val", False))
    n.duration_micros = RUNTIME
    return [n]


def two_comp_nodes_dependent(ids):
    parent = one_comp_node(ids)[0]
    child = one_comp_node(ids)[0]
    child.data_deps.append(parent.id)
    return [parent, child]


def comm_coll(name, comm_type, comm_size):
    def build(ids):
        n = ids.node(name, NodeType.COMM_COLL_NODE)
        n.attr += [attr("is_cpu_op", "bool_val", False), attr("comm_type", "int64_val", int(comm_type)),
                   attr("comm_size", "int64_val", comm_size)]
        return [n]

    return build


def one_remote_mem_load_node(ids):
    n = ids.node("MEM_LOAD_NODE", NodeType.MEM_LOAD_NODE)
    n.attr += [attr("is_cpu_op", "bool_val", False), attr("tensor_size", "uint64_val", TENSOR_SIZE)]
    return [n]


def one_metadata_node_all_types(ids):
    n = ids.node("METADATA_NODE", NodeType.METADATA_NODE)
    n.attr += [
        attr("double", "double_val", 1.2345, "double"), attr("double_list", "double_list", [1.2345, 2.3456]),
        attr("float", "float_val", 1.2345, "float"), attr("float_list", "float_list", [1.2345, 2.3456]),
        attr("int32", "int32_val", 12345, "int32"), attr("int32_list", "int32_list", [12345, 23456]),
        attr("int64", "int64_val", 9876543210, "int64"),
        attr("int64_list", "int64_list", [9876543210, 1234567890]),
        attr("uint32", "uint32_val", 12345, "uint32"), attr("uint32_list", "uint32_list", [12345, 23456]),
        attr("uint64", "uint64_val", 9876543210, "uint64"),
        attr("uint64_list", "uint64_list", [9876543210, 1234567890]),
        attr("sint32", "sint32_val", -12345, "sint32"), attr("sint32_list", "sint32_list", [12345, -23456]),
        attr("sint64", "sint64_val", -9876543210, "sint64"),
        attr("sint64_list", "sint64_list", [9876543210, -1234567890]),
        attr("fixed32", "fixed32_val", 12345), attr("fixed32_list", "fixed32_list", [12345, 23456]),
        attr("fixed64", "fixed64_val", 9876543210),
        attr("fixed64_list", "fixed64_list", [9876543210, 1234567890]),
        attr("sfixed32", "sfixed32_val", -12345), attr("sfixed32_list", "sfixed32_list", [12345, -23456]),
        attr("sfixed64", "sfixed64_val", -9876543210),
        attr("sfixed64_list", "sfixed64_list", [9876543210, -1234567890]),
        attr("bool", "bool_val", True, "bool"), attr("bool_list", "bool_list", [i % 2 == 0 for i in range(10)]),
        attr("string", "string_val", "12345", "string"),
        attr("string_list", "string_list", [str(12345 + i) for i in range(10)]),
        attr("bytes", "bytes_val", b"12345"),
        attr("bytes_list", "bytes_list", [str(12345 + i).encode() for i in range(10)]),
    ]
    return [n]


EXAMPLES = {
    "one_comp_node": one_comp_node,
    "two_comp_nodes_dependent": two_comp_nodes_dependent,
    "ALL_REDUCE": comm_coll("ALL_REDUCE", CollectiveCommType.ALL_REDUCE, COMM_SIZE),
    "ALL_TO_ALL": comm_coll("ALL_TO_ALL", CollectiveCommType.ALL_TO_ALL, COMM_SIZE),
    "BARRIER": comm_coll("BARRIER", CollectiveCommType.BARRIER, 0),
    "one_remote_mem_load_node": one_remote_mem_load_node,
    "one_metadata_node_all_types": one_metadata_node_all_types,
}

if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for name, build in EXAMPLES.items():
        write(name, build)
    print(f"wrote {len(EXAMPLES) * NUM_NPUS} files to {OUT}")
