#!/bin/bash
# The H100 measurements in one device call (inside the 10-minute call limit):  bash experiments/h100_campaign.sh
# What the H100 topology (topologies/h100_nvl8_ib_ndr.yaml) took over from the H200 until 2026-12-05, measured
# on an H100 SXM: the small-M GEMM curve (3 runs), HugeCTR's concat kernels (strided copy), the element-wise
# kernels, the dense step, the embedding backward and the async wgrad. Each step has its own time limit, so one
# slow step cannot cost the others. Writes under $OUT: machine.txt, one CSV set per step, log_<step>.txt.
# Run from a folder that holds simfuse/ and experiments/ (the script puts its parent folder on PYTHONPATH).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$HERE PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/simfuse_h100}
mkdir -p "$OUT"
{ date -u +%Y-%m-%dT%H:%M:%SZ; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))'
  which nvcc || ls /usr/local/cuda*/bin/nvcc
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
E=$HERE/experiments
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 lim=$2; shift 2
  echo "== $name $(date -u +%H:%M:%S)"
  timeout "$lim" "$@" >"$OUT/log_$name.txt" 2>&1; echo "rc=$? $(date -u +%H:%M:%S)"; tail -3 "$OUT/log_$name.txt"
}
step gemm0 70 python3 "$E/gemm_small_m.py" "$OUT/gemm_small_m_h100_run0.csv"
step dense_step 90 python3 "$E/dlrm_dense_step.py" measure "$OUT/dense_step"
step concat 60 python3 "$E/dense_ew_kernels.py" measure-concat "$OUT/dense_ew"
step emb_bwd 130 python3 "$E/embedding_backward.py" measure "$OUT/emb_bwd"
step gemm1 60 python3 "$E/gemm_small_m.py" "$OUT/gemm_small_m_h100_run1.csv"
step dense_ew 50 python3 "$E/dense_ew_kernels.py" measure "$OUT/dense_ew"
step gemm2 60 python3 "$E/gemm_small_m.py" "$OUT/gemm_small_m_h100_run2.csv"
step async_wgrad 40 python3 "$E/async_wgrad.py" measure "$OUT/async_wgrad"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$OUT/machine.txt"
