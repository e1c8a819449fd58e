"""Regenerate the nccl-tests fixtures of this directory (see README.md): each reproduces the *format* of one public
log (launcher prefixes, preamble, column layout, which lines exist, failure-line shapes); all text (host names,
paths, command lines, Pids, PCI ids, warnings, errors) and all numbers are ours: synthetic numbers of the source's
magnitude (alpha-beta model + fixed per-size jitter, deterministic).
Run: python tests/data/nccl_tests/_make_fixtures.py"""

from __future__ import annotations

import math
from pathlib import Path

HERE = Path(__file__).parent
BUSBW = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
         "all_gather": lambda n: (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n}


def t_fmt(us: float) -> str:
    return f"{us:7.2f}" if us < 100 else f"{us:7.1f}" if us < 10000 else f"{us:7.0f}"


def times(coll, n, sizes, alpha_us, busbw_gbs, dip=None):
    out = []
    for i, s in enumerate(sizes):
        t = alpha_us + BUSBW[coll](n) * s / (busbw_gbs * 1e3)
        t *= 1.0 + 0.02 * math.sin(1.7 * i + 0.3)
        if dip and s in dip:
            t *= dip[s]
        out.append(t)
    return out


def row(s, elt, typ, redop, root, t, n, coll, wrong="0", t_in=None, in_wrong=None):
    alg = s / (t * 1e3)
    bus = alg * BUSBW[coll](n)
    t_in = t * 0.997 if t_in is None else t_in
    alg_in = s / (t_in * 1e3)
    cols = f"{s:12d}  {s // elt:12d}  {typ:>8}  {redop:>6}"
    if root is not None:
        cols += f"  {root:>6}"
    w_in = wrong if in_wrong is None else in_wrong
    return (f"{cols}  {t_fmt(t)}  {alg:6.2f}  {bus:6.2f}  {wrong:>5}  {t_fmt(t_in)}  {alg_in:6.2f}  "
            f"{alg_in * BUSBW[coll](n):6.2f}  {w_in:>5}")


NEW_HDR = ["#",
           "#                                                              out-of-place                       in-place          ",
           "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
           "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       "]
OLD_HDR = ["#",
           "#                                                     out-of-place                       in-place",
           "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error",
           "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]


def pow2(lo, hi):
    s, out = lo, []
    while s <= hi:
        out.append(s)
        s *= 2
    return out


def nthread(lo, hi, gpus=1, iters=20, validation=1):
    return (f"# nThread 1 nGpus {gpus} minBytes {lo} maxBytes {hi} step: 2(factor) warmup iters: 5 iters: {iters} "
            f"agg iters: 1 validation: {validation} graph: 0")


def avg_busbw(coll, n, sizes, ts):
    """The trailer's "Avg bus bandwidth": the mean busbw over both blocks of the rows that row() prints."""
    bws = [s / (t * f * 1e3) * BUSBW[coll](n) for s, t in zip(sizes, ts, strict=True) for f in (1.0, 0.997)]
    return sum(bws) / len(bws)


# All text below other than nccl-tests' own layout (headers, column names, trailer labels) is ours: host names
# node-a, node-b, ... (node-r is the 18th), paths under /opt/bench, Pids, PCI bus ids and thread ids made up here,
# warning and error lines paraphrased in the shape the reader (simfuse/calibrate/nccl_tests.py) detects.
NODES = [f"node-{c}" for c in "abcdefghijklmnopqr"]
BENCH = "/opt/bench/bin"


def bus_ids(n, first=0x1b, step=0x11):
    return [f"0x{first + step * d:02x}" for d in range(n)]


def rank_lines(hosts, per_host, pid0, dev_name, buses, start=0):
    out, r = [], 0
    for h_i, h in enumerate(hosts):
        for d in range(per_host):
            if r >= start:
                out.append(f"#  Rank {r:2d} Group  0 Pid {pid0 + 1000 * h_i + d:6d} on {h:>10} device {d:2d} "
                           f"[{buses[d % len(buses)]}] {dev_name}")
            r += 1
    return out


H100 = "NVIDIA H100 80GB HBM3"  # the name CUDA reports for the device: what the reader stores as the device


def write(name, lines):
    (HERE / name).write_text("\n".join(lines) + "\n")


def main():
    # A: NVIDIA/nccl-tests#290 format, two H100 nodes under srun --label (" 0: "), #wrong N/A (validation 0).
    sizes = pow2(8 << 20, 8 << 30)
    ts = times("all_reduce", 16, sizes, 60.0, 156.0)
    body = [nthread(8 << 20, 8 << 30, iters=200, validation=0), "#", "# Using devices",
            *rank_lines(NODES[:2], 8, 52101, H100, bus_ids(8)), *NEW_HDR,
            *[row(s, 4, "float", "sum", "-1", t, 16, "all_reduce", "N/A") for s, t in zip(sizes, ts, strict=True)],
            "# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg_busbw('all_reduce', 16, sizes, ts):.1f}",
            "#", ""]
    write("h100_2x8_all_reduce_srun_label.log", [" 0: " + ln if ln else " 0:" for ln in body])
    # B: NVIDIA/nccl-tests#290 format, one H100 node, one process driving 8 GPUs (NVLS: busbw above 450 GB/s).
    sizes = pow2(128 << 20, 4 << 30)
    ts = times("all_reduce", 8, sizes, 40.0, 480.0)
    write("h100_1x8_all_reduce_nvls.log", [
        nthread(128 << 20, 4 << 30, gpus=8, iters=2), "#", "# Using devices",
        *[ln.replace(f"Pid {52101 + d:6d}", "Pid  52340") for d, ln in
          enumerate(rank_lines(NODES[:1], 8, 52101, H100, bus_ids(8)))],
        *NEW_HDR, *[row(s, 4, "float", "sum", "-1", t, 8, "all_reduce") for s, t in zip(sizes, ts, strict=True)],
        "# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg_busbw('all_reduce', 8, sizes, ts):.1f}", "#"])
    # C: nebius/soperator#428 format: an srun command line (--nodes, --ntasks-per-node, all_reduce_perf_mpi, -g 1),
    # 2 x 8 H100 (rank 0 on the host whose name sorts second), 512M..8G, no prefix.
    sizes = pow2(512 << 20, 8 << 30)
    ts = times("all_reduce", 16, sizes, 80.0, 196.0)
    write("h100_2x8_all_reduce_soperator.log", [
        f"srun --mpi=pmix --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 {BENCH}/all_reduce_perf_mpi "
        "-b 512M -e 8G -f 2 -g 1", "",
        nthread(512 << 20, 8 << 30), "#", "# Using devices",
        *rank_lines([NODES[1], NODES[0]], 8, 7301, H100, bus_ids(8, first=0x21, step=0x13)),
        *NEW_HDR, *[row(s, 4, "float", "sum", "-1", t, 16, "all_reduce") for s, t in zip(sizes, ts, strict=True)],
        "# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg_busbw('all_reduce', 16, sizes, ts):.1f}", "#"])
    # D: microsoft/mscclpp#87 format: mpirun --tag-output, mscclpp-test layout (in-place block first, left empty),
    # 1 row.
    t = 23275.0
    p = "[1,0]<stdout>:"
    write("mscclpp_alltoall_2x8_tag_output.log", [
        p + "# MSCCL++ bootstrap", p + "# MSCCL++ connections set up", p + "#",
        p + "#                                    in-place                       out-of-place          ",
        p + "#       size         count     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong",
        p + "#        (B)    (elements)     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       ",
        p + f"  1073741824      16777216                                     {t:5.0f}   "
            f"{(1 << 30) / (t * 1e3):5.2f}   {(1 << 30) / (t * 1e3) * 15 / 16:5.2f}      0",
        p, p + "# Out of bounds values : 0 OK", ""])
    # E: NVIDIA/nccl-tests#78 format: NCCL 2.8, 256 GPUs (mpirun -n 256 -npernode 16), old layout with error N/A
    # (-c 0), no Rank lines.
    sizes = pow2(32 << 20, 2 << 30)
    ts = times("all_reduce", 256, sizes, 300.0, 80.0)
    write("nccl28_256gpu_all_reduce_na.log", [
        f"mpirun -n 256 -npernode 16 --hostfile /opt/bench/hosts-16 -x NCCL_DEBUG=WARN {BENCH}/all_reduce_perf "
        "-b 32M -e 2G -f 2 -g 1 -c 0", "",
        "NCCL version 2.8.4+cuda11.0", *OLD_HDR,
        *[row(s, 4, "float", "sum", None, t, 256, "all_reduce", "N/A") for s, t in zip(sizes, ts, strict=True)]])
    # F: NVIDIA/nccl-tests#107 format: two processes of a build without MPI: each prints its own 1-rank header.
    hdr = ["# nThread 1 nGpus 1 minBytes 1310720000 maxBytes 1310720000 step: 1048576(bytes) warmup iters: 5 "
           "iters: 20 validation: 1", "#", "# Using devices"]
    s, t1, t2 = 1310720000, 140000.0, 141000.0
    write("v100_2x1_duplicate_rank0.log", [
        f"user@node-a:~$ mpirun -host node-a,node-b -np 2 {BENCH}/all_reduce_perf -b 1250M -e 1250M -g 1",
        *hdr, *hdr,
        "#   Rank  0 Pid   6217 on     node-b device  0 [0x1e] Tesla V100-SXM2-16GB",
        "#   Rank  0 Pid   6108 on     node-a device  0 [0x1e] Tesla V100-SXM2-16GB", *OLD_HDR, *OLD_HDR[1:],
        f"  {s:10d}     327680000   float     sum   {t1:6.0f}    {s / t1 / 1e3:4.2f}    0.00  0e+00   {t1:6.0f}"
        f"    {s / t1 / 1e3:4.2f}    0.00  0e+00",
        f"  {s:10d}     327680000   float     sum   {t2:6.0f}    {s / t2 / 1e3:4.2f}    0.00  0e+00   {t2:6.0f}"
        f"    {s / t2 / 1e3:4.2f}    0.00  0e+00"])
    # G: NVIDIA/nccl#1453 format: MPICH/Intel MPI -prepend-rank ("[0]") also in the middle of rows (split writes).
    sizes = pow2(512 << 10, 1 << 30)
    ts = times("all_reduce", 24, sizes, 150.0, 30.0, dip={s: 9.0 for s in sizes if s >= 64 << 20})
    lines = ["[0] " + ln for ln in NEW_HDR]
    for s, t in zip(sizes, ts, strict=True):
        alg = s / (t * 1e3)
        lines.append(f"[0] {s:12d}  {s // 4:12d}     float     sum      -1[0]  {t_fmt(t)}  {alg:6.2f}  "
                     f"{alg * 46 / 24:6.2f}      0[0]  {t_fmt(t)}  {alg:6.2f}  {alg * 46 / 24:6.2f}      0")
    write("prepend_rank_split_writes.log", lines)
    # H: microsoft/msccl#48 format: old layout, all-to-all with an empty redop column, broken in-place numbers.
    sizes = pow2(1 << 20, 128 << 20)
    ts = times("all_to_all", 16, sizes, 80.0, 2.15)
    lines = list(OLD_HDR[1:])
    for s, t in zip(sizes, ts, strict=True):
        alg = s / (t * 1e3)
        t_in = 0.2 + 0.3 * (s % 3)
        lines.append(f"  {s:10d}  {s // 64:12d}   float          {t_fmt(t)}  {alg:6.2f}  {alg * 15 / 16:6.2f}  0e+00"
                     f"  {t_in:7.2f}  {s / (t_in * 1e3):6.2f}  {s / (t_in * 1e3) * 15 / 16:6.2f}  1e+00")
    write("msccl_alltoall_2x8_empty_redop.log", lines)
    # I: coreweave/nccl-tests#43 format: a GB200 NVL72 log pasted from "Rank 71" on (earlier Rank lines cut); rank 71
    # is device 3 of the 18th 4-GPU node.
    sizes = pow2(512 << 20, 8 << 30)
    ts = times("all_reduce", 72, sizes, 60.0, 840.0)
    write("gb200_nvl72_excerpt.log", [
        f"#  Rank 71 Group  0 Pid  31703 on {NODES[17]:>10} device  3 [0x{0x1b + 0x11 * 3:02x}] NVIDIA Graphics Device",
        *NEW_HDR, *[row(s, 4, "float", "sum", "-1", t, 72, "all_reduce") for s, t in zip(sizes, ts, strict=True)],
        "# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg_busbw('all_reduce', 72, sizes, ts):.1f} "])
    # J: NVIDIA/nccl-tests#5 format: NCCL 1.x tests ("bytes N type op ... res"), failure before the first row.
    write("nccl1_crash_before_results.log", [
        "root@node-a:/opt/bench# ./bin/all_reduce_perf -b 8 -e 128M -f 2 -g 8",
        "nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1",
        "# NCCL Tests built against NCCL 1.0", "# Using devices",
        *[f"#   Rank  {r} on {NODES[0]:>10} device  {r} [{b}] Tesla P100-PCIE-16GB"
          for r, b in enumerate(bus_ids(8, first=0x04, step=0x01))], "",
        "#                                                 out-of-place                    in-place",
        "#      bytes             N    type      op     time  algbw  busbw      res     time  algbw  busbw      res",
        "NCCL failure all_reduce.cu:71 'cuda call failed'"])
    # K: NVIDIA/nccl#304 format: an OpenMPI "[host:pid]" warning and a "----" help box first, mpirun -np 2 ... -g 8
    # (2 processes x 8 GPUs), an NCCL INFO line, then a segfault before the first row.
    write("openmpi_preamble_crash.log", [
        "[node-a:41017] WARNING: remote shell type not recognised, assuming sh",
        "-" * 74, "WARNING: Open MPI found a network device it has no default settings", "for; it uses generic ones:",
        "", "  Host:                  node-a", "  Device:                ibdev3", "", "-" * 74,
        f"root@node-a:/opt/bench# mpirun --allow-run-as-root -H node-a,node-b -np 2 {BENCH}/all_reduce_perf "
        "-b 8 -e 128M -f 2 -g 8",
        nthread(8, 128 << 20, gpus=8), "#", "# Using devices",
        *rank_lines(NODES[:2], 8, 41030, "Tesla V100-SXM2-32GB", bus_ids(8, first=0x05, step=0x03)),
        *NEW_HDR,
        "node-a:41030:41077 [0] NCCL INFO comm 0x5a10c0 rank 0 nranks 16 cudaDev 0 busId 5000 - Init COMPLETE",
        "[node-a:41030] *** rank 0 stopped by a signal ***",
        "[node-a:41030] signal 11 (Segmentation fault) at address 0x18",
        "mpirun noticed: rank 0 (PID 41030) on node-a exited on signal 11 (Segmentation fault)."])
    # L: NVIDIA/nccl-tests#322 format: rows up to 16 GiB, then the run fails on two of its 8 hosts (pdsh-style
    # "host: " prefix).
    sizes = pow2(1 << 30, 16 << 30)
    ts = times("all_reduce", 64, sizes, 14000.0, 372.0)
    write("h100_crash_after_rows.log", [
        *NEW_HDR[2:], *[row(s, 4, "float", "sum", "-1", t, 64, "all_reduce") for s, t in zip(sizes, ts, strict=True)],
        "node-h: Test NCCL failure common.cu:640 'cuda call failed (NCCL_DEBUG=INFO says which) / '",
        " .. node-h pid 52117: Test failure common.cu:702",
        "node-c: Test NCCL failure common.cu:640 'cuda call failed (NCCL_DEBUG=INFO says which) / '"])
    # M: NVIDIA/nccl#644 format: an old layout without a redop column (all-gather), 8 ranks.
    sizes = pow2(64 << 10, 512 << 20)
    ts = times("all_gather", 8, sizes, 20.0, 7.35)
    lines = ["#                                             out-of-place                       in-place",
             "#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error",
             "#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"]
    for s, t in zip(sizes, ts, strict=True):
        alg = s / (t * 1e3)
        lines.append(f"  {s:10d}  {s // 32:12d}   float  {t_fmt(t)}  {alg:6.2f}  {alg * 7 / 8:6.2f}  0e+00  "
                     f"{t_fmt(t * 0.99)}  {alg / 0.99:6.2f}  {alg / 0.99 * 7 / 8:6.2f}  0e+00")
    write("old_all_gather_no_redop.log", lines)


if __name__ == "__main__":
    main()
