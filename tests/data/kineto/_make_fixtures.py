"""Regenerate the synthetic Kineto fixtures of this directory (see README.md).

Each fixture reproduces the *layout* of a public PyTorch profiler (Kineto) trace -- top-level keys, event
categories, the args the readers use (``External id``, ``Input Dims``, ``Input type``, ``Collective name``,
``In msg nelems`` ...) -- with events and numbers of our own making (a small fp32 MLP step; DDP all-reduce
buckets whose times follow an alpha-beta model with a fixed per-call jitter).  Deterministic: no random draws.
Run: python tests/data/kineto/_make_fixtures.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

HERE = Path(__file__).parent

# --------------------------------------------------------------------------------- ROCm (AMD MI250) MLP step
#: one MI250 GCD as torch.cuda.get_device_properties reports it on ROCm: 104 CUs (208 per MI250, 2 GCDs; AMD
#: Instinct MI250 data sheet), 64 GiB HBM2e per GCD (128 GB per MI250), wavefront 64 (CDNA2)
MI250_GCD = {"id": 0, "name": "AMD Instinct MI250", "totalGlobalMem": 64 << 30, "computeMajor": 9,
             "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
             "regsPerBlock": 65536, "warpSize": 64, "sharedMemPerBlock": 65536, "numSms": 104,
             "maxSharedMemoryPerMultiProcessor": 65536}
#: Tensile (rocBLAS / hipBLASLt) solution names: Cijk_<A layout>_<B layout>_<types>_..._MT<tile>_MI<instr>_...
TENSILE_NN = "Cijk_Ailk_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT32x32x16_MI16x16x4x1_SN_K1_WG32_8_1"
TENSILE_TN = "Cijk_Alik_Bljk_S_B_Bias_HA_S_SAV_UserArgs_MT64x32x16_MI16x16x4x1_SN_K1_WG64_4_1"


def _ew(functor: str, arity: int) -> str:
    """PyTorch's vectorized element-wise kernel name for one functor (fp32, vector width 4)."""
    return (f"void at::native::vectorized_elementwise_kernel<4, {functor}, at::detail::Array<char*, {arity}> >"
            f"(int, {functor}, at::detail::Array<char*, {arity}>)")


#: (operator, Input Dims, Input type, kernels [(name, dur_us)]) of one toy step: a Linear(64 -> 256) on a batch
#: of 8, ReLU, MSE loss, backward (weight gradient by mm, input gradient not needed), SGD by _foreach_add_.
#: Two GEMMs of the same FLOP count (2 x 8 x 256 x 64 = 262,144) with different min(M, N): 8 and 64.
MLP_STEP = [
    ("aten::addmm", [[256], [8, 64], [64, 256], [], []], ["float", "float", "float", "Scalar", "Scalar"],
     [(TENSILE_TN, 14.4)]),
    ("aten::clamp_min", [[8, 256], []], ["float", "Scalar"],
     [(_ew("at::native::(anonymous namespace)::launch_clamp_scalar_float", 2), 3.52)]),
    ("aten::mse_loss", [[8, 256], [8, 256], []], ["float", "float", "Scalar"],
     [(_ew("at::native::mse_kernel_cuda_float", 3), 4.8),
      ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
       "float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, "
       "float, float>, unsigned int, float, 4>)", 9.6)]),
    ("aten::fill_", [[], []], ["float", "Scalar"], [(_ew("at::native::FillFunctor<float>", 1), 2.4)]),
    ("aten::threshold_backward", [[8, 256], [8, 256], []], ["float", "float", "Scalar"],
     [(_ew("at::native::BinaryFunctor<float, float, float, at::native::threshold_kernel_impl_float>", 3), 4.0)]),
    ("aten::mm", [[256, 8], [8, 64]], ["float", "float"], [(TENSILE_NN, 11.2)]),
    ("aten::sum", [[8, 256], [], [], []], ["float", "ScalarList", "Scalar", ""],
     [("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
       "at::native::sum_functor_float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
       "at::native::func_wrapper_t<float, at::native::sum_functor_float>, unsigned int, float, 4>)", 8.8)]),
    ("aten::add_", [[256], [256], []], ["float", "float", "Scalar"],
     [(_ew("at::native::CUDAFunctor_add<float>", 3), 3.2)]),
    ("aten::_foreach_add_", [[[256, 64], [256]], [[256, 64], [256]], []], ["TensorList", "TensorList", "Scalar"],
     [("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
       "TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, "
       "std::plus<float>, float>(...)", 7.2)]),
]


def _strides(dims):
    out = []
    for d in dims:
        if d and isinstance(d[0], list):
            out.append([_strides([x])[0] for x in d])
        else:
            out.append([math.prod(d[i + 1:]) for i in range(len(d))] if d else [])
    return out


def rocm_mlp_trace() -> dict:
    pid, tid, gpu = 4242, 4242, 2  # ROCm traces put the kernels under pid = device index
    ev: list[dict] = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": pid, "tid": tid,
                       "ts": 1000.0, "dur": 900.0, "args": {"External id": 1, "Record function id": 0}}]
    ts, gts, corr = 1010.0, 1030.0, 200
    for ext, (op, dims, types, kernels) in enumerate(MLP_STEP, start=10):
        ev.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": pid, "tid": tid, "ts": ts, "dur": 30.0,
                   "args": {"External id": ext, "Record function id": ext, "Concrete Inputs": [""] * len(dims),
                            "Input type": types, "Input Strides": _strides(dims), "Input Dims": dims,
                            "Ev Idx": ext - 10}})
        for name, dur in kernels:
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "hipExtModuleLaunchKernel"
                       if name.startswith("Cijk_") else "hipLaunchKernel", "pid": pid, "tid": tid,
                       "ts": ts + 5.0, "dur": 6.0, "args": {"External id": ext, "correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": gpu, "tid": 0, "ts": gts, "dur": dur,
                       "args": {"External id": ext, "device": gpu, "stream": 0, "correlation": corr,
                                "kind": "Dispatch Kernel"}})
            ev.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": ts + 5.0, "cat": "ac2g",
                       "name": "ac2g"})
            ev.append({"ph": "f", "id": corr, "pid": gpu, "tid": 0, "ts": gts, "cat": "ac2g", "name": "ac2g",
                       "bp": "e"})
            gts += dur + 1.6
        ts += 40.0
    ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Host)", "pid": gpu, "tid": 0,
               "ts": gts + 5.0, "dur": 3.0, "args": {"device": gpu, "stream": 0, "bytes": 4}})
    return {"schemaVersion": 1, "deviceProperties": [dict(MI250_GCD, id=i) for i in range(4)], "record_shapes": 1,
            "traceName": "mlp_toy_rank0.pt.trace.json", "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1790000000000000000, "traceEvents": ev}


# ---------------------------------------------------------------------------------- NCCL (DDP on 2 A100 ranks)
#: DDP all-reduce buckets (fp32 elements): 5 distinct sizes, 3 iterations each; two parameter broadcasts first
BUCKETS = [393216, 1048576, 2621440, 4194304, 6553600]
BROADCASTS = [65536, 262144]
#: alpha-beta model of one all-reduce on 2 NVLink ranks (round numbers of an A100 pair's magnitude: 20 us launch
#: and protocol latency, 150 GB/s bus bandwidth -- NCCL's busbw on 2 A100s, NVLink3 600 GB/s per GPU)
ALPHA_US, BUSBW_GB_S = 20.0, 150.0
JITTER = (1.0, 1.03, 0.985)  # per iteration: the median of three calls is the middle value, the model's time


def _nccl_kernel(coll: str, dtype: str) -> str:
    return f"ncclKernel_{coll}_RING_LL_Sum_{dtype}(ncclDevComm*, unsigned long, ncclWork*)"


def _comms_args(ext: int, name: str, nelems: int, dtype: str, group: int) -> dict:
    return {"External id": ext, "Record function id": ext, "Collective name": name, "dtype": dtype,
            "In msg nelems": nelems, "Out msg nelems": nelems, "In split size": "[]", "Out split size": "[]",
            "Global rank start": 0, "Global rank stride": 1, "Group size": group,
            "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": "[0, 1]" if group == 2 else "[]"}


def ddp_nccl_trace(rank: int) -> dict:
    """Rank ``rank`` of a 2-rank DDP run: record_param_comms CPU ops and their NCCL kernels.  Broadcasts and
    the first iteration's all-reduces carry the collective args on the kernel itself (Kineto >= 2.4); later
    iterations only on the record_param_comms op of the same External id; a ``wait`` op has 0 elements."""
    pid, gpu = 3000 + rank, rank
    ev: list[dict] = []
    ext, ts = 100, 10_000.0
    calls = [("broadcast", "Broadcast", "int8_t", n, 0) for n in BROADCASTS]
    calls += [("allreduce", "AllReduce", "float", n, it) for it in range(3) for n in reversed(BUCKETS)]
    for name, kname, kdtype, nelems, it in calls:
        ext += 1
        args = _comms_args(ext, name, nelems, "Float", 2)
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": pid + 1,
                   "ts": ts, "dur": 25.0, "args": args})
        size = nelems * 4
        bus = 2 * (2 - 1) / 2 if name == "allreduce" else 1.0
        dur = (ALPHA_US + bus * size / (BUSBW_GB_S * 1e3)) * JITTER[it]
        kargs = {"External id": ext, "queued": 0, "device": gpu, "context": 1, "stream": 40,
                 "correlation": 5000 + ext, "registers per thread": 96, "grid": [8, 1, 1], "block": [544, 1, 1]}
        if name == "broadcast" or it == 0:
            kargs.update({k: v for k, v in args.items() if k not in ("External id", "Record function id")})
        ev.append({"ph": "X", "cat": "kernel", "name": _nccl_kernel(kname, kdtype), "pid": gpu, "tid": 40,
                   "ts": ts + 40.0, "dur": round(dur, 3), "args": kargs})
        ext += 1
        ev.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": pid, "tid": pid,
                   "ts": ts + 60.0, "dur": 30.0, "args": {**_comms_args(ext, "wait", 0, "Byte", 1)}})
        ts += dur + 200.0
    return {"schemaVersion": 1,
            "deviceProperties": [{"id": i, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42505273344,
                                  "computeMajor": 8, "computeMinor": 0, "warpSize": 32, "numSms": 108}
                                 for i in range(2)],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2, "pg_count": 1,
                                "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config":
                                               "cuda:nccl", "pg_size": 2, "ranks": [0, 1]}],
                                "nccl_version": "2.17.1"},
            "traceName": f"ddp_rank{rank}.pt.trace.json", "traceEvents": ev}


def _write(name: str, data: dict) -> None:
    lines = [json.dumps({k: v for k, v in data.items() if k != "traceEvents"})[:-1] + ', "traceEvents": [']
    lines += [json.dumps(e) + ("," if i < len(data["traceEvents"]) - 1 else "")
              for i, e in enumerate(data["traceEvents"])]
    (HERE / name).write_text("\n".join(lines) + "\n]}\n")


def main() -> None:
    _write("rocm_mi250_mlp_step.json", rocm_mlp_trace())
    for r in (0, 1):
        _write(f"ddp_nccl_2ranks_rank{r}.json", ddp_nccl_trace(r))


if __name__ == "__main__":
    main()
