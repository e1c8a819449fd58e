"""Chakra execution traces: the proto3 codec, the file framing, and the converter to/from the graph IR."""

from __future__ import annotations

import gzip
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.collectives.groups import Group, world
from simfuse.costs import KernelWork
from simfuse.errors import SpecError
from simfuse.graph.chakra import export_et, import_et
from simfuse.graph.chakra.io import decode_et, encode_et, read_et
from simfuse.graph.chakra.proto import (
    ATTR_KINDS,
    AttributeProto,
    GlobalMetadata,
    IOInfo,
    Node,
    NodeType,
    Reader,
    encode_attribute,
    encode_node,
    encode_varint,
    parse_attribute,
    parse_node,
    zigzag_decode,
    zigzag_encode,
)
from simfuse.graph.ir import (
    AllToAllVNode,
    CollectiveNode,
    ComputeNode,
    DelayNode,
    FusedNode,
    Graph,
    RecvNode,
    SendNode,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "chakra" / "et_generator"

# ------------------------------------------------------------------------- bytes written by hand, per the spec
# A varint-length-delimited frame is <len><payload>; a key is (field << 3) | wire type.


def frame(payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([len(payload)]) + payload


def ld(key: int, payload: bytes) -> bytes:  # a length-delimited field, key byte given, payload < 128 bytes
    return bytes([key, len(payload)]) + payload


# GlobalMetadata { version (1, LEN) = "1.0.0" }  ->  0a 05 "1.0.0"
META = frame(ld(0x0A, b"1.0.0"))
# AttributeProto { name (1, LEN) = "is_cpu_op"; bool_val (27, varint) = false }: key 27 << 3 = 216 = d8 01;
# a oneof member is present even when it holds the default, so it is written: d8 01 00
IS_CPU_OP_FALSE = ld(0x0A, b"is_cpu_op") + b"\xd8\x01\x00"
# Node { name (2) = "COMP_NODE"; type (3, varint) = COMP_NODE = 4; duration_micros (7, varint) = 5;
#        attr (10, LEN) = [is_cpu_op] }; id = 0 is the proto3 default and is omitted
ONE_COMP_NODE_0 = META + frame(ld(0x12, b"COMP_NODE") + b"\x18\x04" + b"\x38\x05" + ld(0x52, IS_CPU_OP_FALSE))
# the same node with id (1, varint) = 1, as the generator writes it for NPU 1 (its id counter is global)
ONE_COMP_NODE_1 = META + frame(b"\x08\x01" + ld(0x12, b"COMP_NODE") + b"\x18\x04" + b"\x38\x05"
                               + ld(0x52, IS_CPU_OP_FALSE))
# Node { id = 1; name = "ALL_REDUCE"; type = COMM_COLL_NODE = 7; attr = [is_cpu_op = false,
#        comm_type int64_val (9, varint: key 48) = ALL_REDUCE = 0, comm_size int64_val = 65536 = 80 80 04] }
ALL_REDUCE_1 = META + frame(b"\x08\x01" + ld(0x12, b"ALL_REDUCE") + b"\x18\x07" + ld(0x52, IS_CPU_OP_FALSE)
                            + ld(0x52, ld(0x0A, b"comm_type") + b"\x48\x00")
                            + ld(0x52, ld(0x0A, b"comm_size") + b"\x48\x80\x80\x04"))


def test_hand_encoded_node_matches_the_schema_field_numbers():
    # Node { id (1) = 1; name (2) = "x"; type (3) = COMP_NODE }
    data = b"\x08\x01" + b"\x12\x01x" + b"\x18\x04"
    assert encode_node(Node(id=1, name="x", type=NodeType.COMP_NODE)) == data
    n = parse_node(data)
    assert (n.id, n.name, n.type, n.attr, n.data_deps) == (1, "x", NodeType.COMP_NODE, [], [])


@pytest.mark.parametrize("name,expected", [("one_comp_node.0.et", ONE_COMP_NODE_0),
                                           ("one_comp_node.1.et", ONE_COMP_NODE_1),
                                           ("ALL_REDUCE.1.et", ALL_REDUCE_1)])
def test_writer_fixtures_equal_the_hand_encoded_bytes(name, expected):
    assert (DATA / name).read_bytes() == expected


def test_hand_encoded_generator_examples_import(tmp_path):
    for rank, data in enumerate((ONE_COMP_NODE_0, ONE_COMP_NODE_1)):
        (tmp_path / f"one_comp_node.{rank}.et").write_bytes(data)
    g = import_et(tmp_path / "one_comp_node")
    assert g.n_ranks == 2 and g.groups == {}
    for rank in (0, 1):
        (node,) = g.programs[rank].nodes
        assert isinstance(node, ComputeNode)
        assert (node.name, node.time_s, node.work, node.stream, node.deps) == ("COMP_NODE", 5e-6, None,
                                                                               "compute", ())


# --------------------------------------------------------------------------------------- codec round trips

u64 = st.integers(0, 2**64 - 1)


@given(u64)
def test_varint_round_trip(v):
    data = encode_varint(v)
    assert len(data) == max(1, (v.bit_length() + 6) // 7)
    r = Reader(data)
    assert r.varint() == v and r.at_end()


@given(st.integers(-(2**63), 2**63 - 1))
def test_zigzag_round_trip(v):
    z = zigzag_encode(v)
    assert 0 <= z < 2**64 and zigzag_decode(z) == v
    assert zigzag_encode(v) == (2 * v if v >= 0 else -2 * v - 1)


def _scalar(stype):
    i32, i64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
    return {
        "double": st.floats(allow_nan=False), "float": st.floats(allow_nan=False, width=32),
        "int32": i32, "int64": i64, "uint32": st.integers(0, 2**32 - 1), "uint64": u64,
        "sint32": i32, "sint64": i64, "fixed32": st.integers(0, 2**32 - 1), "fixed64": u64,
        "sfixed32": i32, "sfixed64": i64, "bool": st.booleans(), "string": st.text(), "bytes": st.binary(),
    }[stype]


@st.composite
def attributes(draw):
    kind = draw(st.sampled_from(sorted(ATTR_KINDS)))
    stype, _, shape = kind.rpartition("_")
    value = draw(st.lists(_scalar(stype), max_size=6) if shape == "list" else _scalar(stype))
    return AttributeProto(name=draw(st.text(max_size=12)), kind=kind, value=value,
                          doc_string=draw(st.text(max_size=8)))


@given(attributes())
def test_attribute_round_trip(a):
    back = parse_attribute(encode_attribute(a))
    assert (back.name, back.kind, back.doc_string) == (a.name, a.kind, a.doc_string)
    assert back.value == a.value


@st.composite
def nodes(draw):
    ids = st.integers(0, 2**64 - 1)
    io = st.one_of(st.none(), st.builds(IOInfo, st.text(max_size=5), st.text(max_size=5), st.text(max_size=5)))
    return Node(id=draw(ids), name=draw(st.text(max_size=10)), type=draw(st.sampled_from(list(NodeType))),
                ctrl_deps=draw(st.lists(ids, max_size=4)), data_deps=draw(st.lists(ids, max_size=4)),
                start_time_micros=draw(ids), duration_micros=draw(ids), inputs=draw(io), outputs=draw(io),
                attr=draw(st.lists(attributes(), max_size=4)))


@settings(max_examples=50)
@given(st.text(max_size=8), st.lists(attributes(), max_size=3), st.lists(nodes(), max_size=4))
def test_file_round_trip(version, meta_attrs, ns):
    et = decode_et(encode_et(GlobalMetadata(version, meta_attrs), ns))
    assert et.metadata == GlobalMetadata(version, meta_attrs)
    assert et.nodes == ns


def test_unpacked_repeated_and_unknown_fields_are_read():
    # data_deps (5) as two unpacked varints, ctrl_deps (4) packed, an unknown field 99 (varint) skipped,
    # fields out of order; a sint64_list attr with one packed and one unpacked chunk
    attr = ld(0x0A, b"s") + ld(0x92, ld(0x0A, bytes([zigzag_encode(-3)])) + b"\x08" + bytes([zigzag_encode(5)]))
    attr = attr.replace(b"\x92", b"\x92\x01")  # sint64_list is field 18: key 146 = 92 01
    data = b"\x28\x07" + b"\x98\x06\x2a" + b"\x22\x02\x02\x03" + b"\x28\x08" + b"\x08\x09" + bytes([0x52, len(attr)]) + attr
    n = parse_node(data)
    assert (n.id, n.data_deps, n.ctrl_deps) == (9, [7, 8], [2, 3])
    assert (n.attr[0].name, n.attr[0].kind, n.attr[0].value) == ("s", "sint64_list", [-3, 5])


def test_negative_int32_is_a_ten_byte_varint():
    a = AttributeProto("t", "int32_val", -1)
    data = encode_attribute(a)
    assert data == ld(0x0A, b"t") + b"\x38" + b"\xff" * 9 + b"\x01"
    assert parse_attribute(data).value == -1


def test_every_attribute_kind_of_the_generator_example_decodes():
    et = read_et(DATA / "one_metadata_node_all_types.0.et")
    attrs = et.nodes[0].attrs()
    assert et.nodes[0].type == NodeType.METADATA_NODE and len(attrs) == 30
    assert attrs["float"].value == struct.unpack("<f", struct.pack("<f", 1.2345))[0]
    assert attrs["sint64"].value == -9876543210 and attrs["sfixed32_list"].value == [12345, -23456]
    assert attrs["bytes_list"].value[-1] == b"12354" and attrs["int64"].doc_string == "int64"
    assert attrs["bool_list"].value == [i % 2 == 0 for i in range(10)]


# ------------------------------------------------------------------------------------------ corrupt input


@pytest.mark.parametrize("data,match", [
    (b"", "empty file"),
    (META + b"\x85", "truncated varint"),                       # a length prefix cut short
    (META + b"\x10\x08\x01", "truncated message"),              # announces 16 bytes, 3 left
    (META + frame(b"\x12\x05ab"), "truncated field"),           # name announces 5 bytes
    (META + frame(b"\x08\xff\xff"), "truncated varint"),        # id varint cut short
    (META + frame(b"\x08" + b"\xff" * 10 + b"\x01"), "longer than 10 bytes"),
    (META + frame(b"\x0d\x00\x00\x00\x00"), "does not match the schema"),  # id (uint64) as fixed32
    (META + frame(b"\x12\x02\xc3\x28"), "invalid UTF-8"),
    (META + frame(b"\x9b\x06"), "unsupported group wire type"),  # unknown field 99, wire type 3 (group)
    (META + frame(b"\x0b"), "does not match the schema"),      # id with wire type 3
    (META + frame(b"\x0f"), "invalid wire type"),
    (META + frame(b"\x00\x00"), "field number 0"),
])
def test_corrupt_bytes_raise_spec_error(data, match):
    with pytest.raises(SpecError, match=match):
        decode_et(data, "bad.0.et")


def test_corrupt_gzip_and_unreadable_files(tmp_path):
    with pytest.raises(SpecError, match="corrupt gzip"):
        decode_et(gzip.compress(ONE_COMP_NODE_0)[:-6])
    with pytest.raises(SpecError, match="not found"):
        read_et(tmp_path / "missing.0.et")


def test_gzip_files_are_read(tmp_path):
    (tmp_path / "t.0.et").write_bytes(gzip.compress(ONE_COMP_NODE_0))
    assert import_et(tmp_path).programs[0].nodes[0].time_s == 5e-6


def _write(tmp_path, nodes_by_rank, prefix="t"):
    for rank, ns in nodes_by_rank.items():
        (tmp_path / f"{prefix}.{rank}.et").write_bytes(encode_et(GlobalMetadata("1.0.0"), ns))
    return tmp_path


def _comp(i, deps=(), ctrl=(), ntype=NodeType.COMP_NODE, attrs=(), dur=1):
    return Node(id=i, name=f"n{i}", type=ntype, data_deps=list(deps), ctrl_deps=list(ctrl), duration_micros=dur,
                attr=list(attrs))


def test_unknown_node_type_is_rejected(tmp_path):
    _write(tmp_path, {0: [_comp(1, ntype=42)]})
    with pytest.raises(SpecError, match="unknown node type 42"):
        import_et(tmp_path)


def test_cycle_and_dangling_deps_are_rejected(tmp_path):
    _write(tmp_path, {0: [_comp(1, deps=[3]), _comp(2, deps=[1]), _comp(3, ctrl=[2])]})
    with pytest.raises(SpecError, match=r"dependency cycle among nodes 1 -> 2 -> 3 -> 1"):
        import_et(tmp_path)
    _write(tmp_path, {0: [_comp(1), _comp(2, deps=[7])]})
    with pytest.raises(SpecError, match="depends on node 7, which is not in the file"):
        import_et(tmp_path)
    _write(tmp_path, {0: [_comp(1), _comp(1)]})
    with pytest.raises(SpecError, match="duplicate node id 1"):
        import_et(tmp_path)


def test_missing_ranks_and_mixed_prefixes_are_rejected(tmp_path):
    _write(tmp_path, {0: [_comp(1)], 2: [_comp(1)]})
    with pytest.raises(SpecError, match=r"missing rank files \[1\]"):
        import_et(tmp_path)
    _write(tmp_path, {1: [_comp(1)]}, prefix="other")
    with pytest.raises(SpecError, match="several traces"):
        import_et(tmp_path)


def _coll(i, comm_type, size=None, pg=None, deps=()):
    attrs = [AttributeProto("comm_type", "int64_val", comm_type)]
    if size is not None:
        attrs.append(AttributeProto("comm_size", "int64_val", size))
    if pg is not None:
        attrs.append(AttributeProto("pg_name", "string_val", pg))
    return Node(id=i, name=f"c{i}", type=NodeType.COMM_COLL_NODE, attr=attrs, data_deps=list(deps))


def test_collective_errors(tmp_path):
    _write(tmp_path, {0: [_coll(1, 5, 8)]})
    with pytest.raises(SpecError, match=r"collective 5 \(BROADCAST\) is not supported"):
        import_et(tmp_path)
    _write(tmp_path, {0: [_coll(1, 0)]})
    with pytest.raises(SpecError, match="without a comm_size"):
        import_et(tmp_path)
    _write(tmp_path, {0: [_coll(1, 0, 8, pg="7")]})
    with pytest.raises(SpecError, match="process group '7' is not defined"):
        import_et(tmp_path)
    _write(tmp_path, {0: [Node(id=1, type=NodeType.COMM_COLL_NODE,
                               attr=[AttributeProto("comm_type", "string_val", "x")])]})
    with pytest.raises(SpecError, match="expected an integer"):
        import_et(tmp_path)


def test_ranks_that_disagree_on_a_collective_are_rejected(tmp_path):
    """Rank 0 all-reduces where rank 1 all-to-alls (or all-reduces another size): the executor matches the k-th
    operation of a group across ranks and ran rank 0's; before, the trace ran without a word."""
    _write(tmp_path, {0: [_coll(1, 0, 65536)], 1: [_coll(1, 6, 65536)]})  # ALL_REDUCE vs ALL_TO_ALL
    with pytest.raises(SpecError, match=r"rank 1 node 'c1': operation 0 on group 'world' is all_to_all of 65536 "
                                        r"bytes, but on rank 0 \('c1'\) all_reduce of 65536 bytes"):
        import_et(tmp_path)
    _write(tmp_path, {0: [_coll(1, 0, 65536), _coll(2, 0, 8, deps=[1])],
                      1: [_coll(1, 0, 65536), _coll(2, 0, 16, deps=[1])]})
    with pytest.raises(SpecError, match=r"operation 1 on group 'world' is all_reduce of 16 bytes"):
        import_et(tmp_path)
    _write(tmp_path, {0: [_coll(1, 0, 65536)], 1: [_coll(1, 0, 65536)]})
    assert len(import_et(tmp_path).programs) == 2


# ------------------------------------------------------------------------------------- the converter


def test_generator_examples_import():
    g = import_et(DATA / "ALL_REDUCE")
    assert g.n_ranks == 2 and g.groups == {"world": world(2)}
    for rank in (0, 1):
        (n,) = g.programs[rank].nodes
        assert isinstance(n, CollectiveNode)
        assert (n.op, n.group, n.size_bytes, n.stream) == ("all_reduce", "world", 65536.0, "comm")
    assert import_et(DATA / "ALL_TO_ALL").programs[1].nodes[0].op == "all_to_all"
    barrier = import_et(DATA / "BARRIER").programs[0].nodes[0]
    assert (barrier.op, barrier.size_bytes) == ("all_reduce", 0.0)
    a, b = import_et(DATA / "two_comp_nodes_dependent").programs[1].nodes
    assert (a.deps, b.deps, b.time_s) == ((), (0,), 5e-6)
    (load,) = import_et(DATA / "one_remote_mem_load_node").programs[0].nodes
    assert load.work == KernelWork("chakra_mem_load", 1, 0.0, 1024.0)
    meta = import_et(DATA / "one_metadata_node_all_types")  # metadata nodes carry no work: dropped
    assert [len(rg.nodes) for rg in meta.programs.values()] == [0, 0]


def test_deps_renumbered_in_dependency_order_and_metadata_nodes_bypassed(tmp_path):
    # file order: c (needs b, ctrl a), meta node m (needs a), b (needs m), a
    _write(tmp_path, {0: [_comp(30, deps=[20], ctrl=[10]), Node(id=15, type=NodeType.METADATA_NODE, data_deps=[10]),
                          _comp(20, deps=[15]), _comp(10),
                          Node(id=40, type=NodeType.COMP_NODE, attr=[AttributeProto("num_ops", "int64_val", 100),
                                                                     AttributeProto("tensor_size", "uint64_val", 8)])]})
    nodes = import_et(tmp_path).programs[0].nodes
    assert [(n.name, n.deps) for n in nodes] == [("n10", ()), ("n20", (0,)), ("n30", (0, 1)), ("", ())]
    assert nodes[3].work == KernelWork("chakra_comp", 1, 100.0, 8.0) and nodes[3].time_s is None


def test_process_groups_from_comm_group_json(tmp_path):
    ns = {r: [_coll(1, 2, 4096, pg="1" if r < 2 else "2"), _coll(2, 0, 64)] for r in range(4)}
    _write(tmp_path, ns)
    (tmp_path / "t.json").write_text(json.dumps({"1": [0, 1], "2": {"ranks": [2, 3]}}))
    g = import_et(tmp_path, gpus_per_node=2)
    assert g.groups == {"1": Group("1", (0, 1)), "2": Group("2", (2, 3)), "world": world(4)}
    assert (g.nodes, g.gpus_per_node) == (2, 2)
    assert [n.group for n in g.programs[3].nodes] == ["2", "world"]
    (tmp_path / "t.json").write_text(json.dumps({"1": [0, 1], "2": [0, 1]}))
    with pytest.raises(SpecError, match="rank 2 issues a collective on group '2'"):
        import_et(tmp_path)
    (tmp_path / "t.json").write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        import_et(tmp_path)
    g = import_et(tmp_path, comm_groups={"1": [0, 1], "2": [2, 3]})  # the argument wins over the file
    assert g.groups["2"].ranks == (2, 3)


def test_send_recv_import(tmp_path):
    def p2p(ntype, src, dst, size_attr="comm_size"):
        return Node(id=1, name="p", type=ntype, attr=[
            AttributeProto("comm_src", "int32_val", src), AttributeProto("comm_dst", "int32_val", dst),
            AttributeProto(size_attr, "int64_val", 512), AttributeProto("comm_tag", "int32_val", 9)])

    _write(tmp_path, {0: [p2p(NodeType.COMM_SEND_NODE, 0, 1)], 1: [p2p(NodeType.COMM_RECV_NODE, 0, 1, "tensor_size")]})
    g = import_et(tmp_path)
    s, r = g.programs[0].nodes[0], g.programs[1].nodes[0]
    assert isinstance(s, SendNode) and (s.dst, s.size_bytes, s.tag) == (1, 512.0, 9)
    assert isinstance(r, RecvNode) and (r.src, r.size_bytes, r.tag) == (0, 512.0, 9)
    _write(tmp_path, {0: [p2p(NodeType.COMM_SEND_NODE, 1, 0)], 1: [p2p(NodeType.COMM_RECV_NODE, 1, 0)]})
    with pytest.raises(SpecError, match="comm_src.*is 1, but this file is rank 0"):
        import_et(tmp_path)


def _sample_graph() -> Graph:
    g = Graph(nodes=2, gpus_per_node=2, repeat=3, name="sample", meta={"classes": 1})
    g.add_group(world(4))
    g.add_group(Group("tp0", (0, 1)))
    g.add_group(Group("tp1", (3, 2)))
    g.add_group(Group("unused", (1, 3)))
    for r in range(4):
        rg = g.program(r)
        a = rg.add(ComputeNode(name="gemm", work=KernelWork("gemm", 132, 1.5e9, 3.25e6, shape=(("m", 4096.0),),
                                                            max_wgs_per_cu=2, traffic_bytes_per_wg=4e6),
                               phase="fwd"))
        b = rg.add(ComputeNode(name="plain", work=KernelWork("chakra_comp", 1, 1000.0, 64.0), deps=(a,)))
        c = rg.add(CollectiveNode(name="ar", op="all_reduce", group="tp0" if r < 2 else "tp1", size_bytes=1.5,
                                  algorithm="ring", deps=(b,)))
        d = rg.add(ComputeNode(name="host", time_s=1.2345e-6, stream="cpu", deps=(c,)))
        e = rg.add(SendNode(name="send", dst=(r + 1) % 4, size_bytes=4096.0, tag=r, deps=(d,)))
        f = rg.add(RecvNode(name="recv", src=(r - 1) % 4, size_bytes=4096.0, tag=(r - 1) % 4, stream="comm_pp"))
        h = rg.add(AllToAllVNode(name="a2av", group="world", send_bytes=[1.0, 2.5, 3.0, 0.0], deps=(e, f)))
        i = rg.add(DelayNode(name="gap", time_s=3e-6, deps=(h,)))
        rg.add(ComputeNode(name="load", work=KernelWork("chakra_mem_load", 1, 0.0, 2048.0), deps=(i,)))
        rg.add(CollectiveNode(name="rs", op="reduce_scatter", group="world", size_bytes=2.0**20, deps=(a,)))
    return g


def _canon(g: Graph):
    def node(n):
        d = dict(vars(n))
        if isinstance(d.get("send_bytes"), np.ndarray):
            d["send_bytes"] = d["send_bytes"].tolist()
        return type(n).__name__, d

    return (g.nodes, g.gpus_per_node, g.groups, g.repeat, g.name, g.meta,
            {r: [node(n) for n in rg.nodes] for r, rg in g.programs.items()})


def test_export_import_round_trip(tmp_path):
    g = _sample_graph()
    paths = export_et(g, tmp_path, prefix="s")
    assert [p.name for p in paths] == ["s.0.et", "s.1.et", "s.2.et", "s.3.et", "s.json"]
    assert json.loads(paths[-1].read_text()) == {"1": [0, 1], "2": [3, 2], "3": [1, 3], "4": [0, 1, 2, 3]}
    back = import_et(tmp_path)
    assert _canon(back) == _canon(g)
    # deterministic bytes; a second export of the import is the same files
    again = tmp_path / "again"
    again.mkdir()
    export_et(back, again, prefix="s")
    for p in paths:
        assert (again / p.name).read_bytes() == p.read_bytes()


def test_exported_nodes_carry_the_chakra_fields_astra_sim_reads(tmp_path):
    export_et(_sample_graph(), tmp_path, prefix="s")
    et = read_et(tmp_path / "s.2.et")
    assert et.metadata.version == "1.0.0"
    by_name = {n.name: n for n in et.nodes}
    gemm = by_name["gemm"].attrs()
    assert by_name["gemm"].type == NodeType.COMP_NODE
    assert (gemm["num_ops"].kind, gemm["num_ops"].value) == ("int64_val", round(132 * 1.5e9))
    assert (gemm["tensor_size"].kind, gemm["tensor_size"].value) == ("uint64_val", round(132 * 3.25e6))
    assert gemm["is_cpu_op"].value is False and by_name["host"].attrs()["is_cpu_op"].value is True
    assert by_name["host"].duration_micros == 1 and by_name["plain"].duration_micros == 0
    assert "simfuse_work.name" not in by_name["plain"].attrs()  # num_ops/tensor_size give it back exactly
    ar = by_name["ar"].attrs()
    assert (by_name["ar"].type, ar["comm_type"].value, ar["comm_size"].value, ar["pg_name"].value) == (
        NodeType.COMM_COLL_NODE, 0, 2, "2")  # tp1 is the 2nd group by name; 1.5 bytes rounds to 2
    send = by_name["send"].attrs()
    assert (send["comm_src"].value, send["comm_dst"].value, send["comm_tag"].value) == (2, 3, 2)
    assert send["comm_src"].kind == "int32_val" and send["comm_size"].kind == "int64_val"
    assert by_name["load"].type == NodeType.MEM_LOAD_NODE
    assert by_name["rs"].data_deps == [0]


def test_export_rejects_what_chakra_cannot_hold(tmp_path):
    g = Graph(nodes=1, gpus_per_node=2, groups={"world": world(2)})
    g.program(0).add(ComputeNode(name="k", time_s=1e-6))
    with pytest.raises(SpecError, match="one trace per rank"):
        export_et(g, tmp_path)
    g.program(1).add(FusedNode(name="f", op=object(), group="world"))
    with pytest.raises(SpecError, match="FusedNode"):
        export_et(g, tmp_path)
    with pytest.raises(SpecError, match="not a directory"):
        export_et(g, tmp_path / "nope")


def test_exported_graph_runs_through_the_generator_fixture_directory_layout(tmp_path):
    # an ASTRA-sim style prefix path (dir/prefix) picks the prefix's files only
    shutil.copy(DATA / "one_comp_node.0.et", tmp_path / "w.0.et")
    shutil.copy(DATA / "one_comp_node.1.et", tmp_path / "w.1.et")
    export_et(_sample_graph(), tmp_path, prefix="s")
    assert import_et(tmp_path / "w").n_ranks == 2
    assert import_et(tmp_path / "s").n_ranks == 4
    assert import_et(sorted(tmp_path.glob("w.*.et"))).programs[1].nodes[0].time_s == 5e-6


def _system(h200):
    from simfuse.system import System

    return System.from_topology(h200, calibrated=False)


def test_generator_examples_run_on_the_executor(h200):
    from simfuse.graph import execute

    system = _system(h200)
    r = execute(system, import_et(DATA / "two_comp_nodes_dependent", gpus_per_node=2))
    assert r.time_s == pytest.approx(10e-6) and r.exposed_comm_time_s == 0.0  # 5 us, then 5 us
    r = execute(system, import_et(DATA / "ALL_REDUCE", gpus_per_node=2))
    assert r.time_s > 0 and r.compute_time_s == 0.0


def test_round_trip_simulates_the_same(h200, tmp_path):
    from simfuse.graph import execute

    system = _system(h200)
    g = _sample_graph()
    export_et(g, tmp_path)
    a, b = execute(system, g), execute(system, import_et(tmp_path))
    assert a.time_s > 0 and b.time_s == a.time_s and b.events == a.events
