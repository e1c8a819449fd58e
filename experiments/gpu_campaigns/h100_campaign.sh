#!/bin/bash
# The H100 measurements in device calls (inside the 10-minute call limit):  bash experiments/gpu_campaigns/h100_campaign.sh [PART]
# What the H100 topology (topologies/h100_nvl8_ib_ndr.yaml) took over from the H200 until 2026-12-05, measured
# on an H100 SXM. PART 1: the small-M GEMM curve (3 runs) and the embedding backward; PART 2: the dense step,
# HugeCTR's concat kernels (strided copy; nvcc compile of about a minute), the element-wise kernels, the async
# wgrad and the embedding backward again. Each step has its own time limit, so one slow step cannot cost the
# others. Writes $OUT/machine.txt, $OUT/logs.txt and $OUT/results.tar.gz (every CSV: the device tool returns at
# most 8 files). Run from a folder that holds simfuse/ and experiments/ (the script puts it on PYTHONPATH).
set -u
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$HERE PYTHONUNBUFFERED=1 MAX_JOBS=16
OUT=${OUT:-/tmp/simfuse_h100}
PART=${1:-2}
R=$OUT/r
mkdir -p "$R"
{ date -u +%Y-%m-%dT%H:%M:%SZ; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))'
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
E=$HERE/experiments/gpu_campaigns
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 lim=$2; shift 2
  echo "== $name $(date -u +%H:%M:%S)" | tee -a "$OUT/logs.txt"
  timeout "$lim" "$@" >>"$OUT/logs.txt" 2>&1; echo "rc=$? $(date -u +%H:%M:%S)" | tee -a "$OUT/logs.txt"
}
if [ "$PART" = 1 ]; then
  for i in 0 1 2; do step gemm$i 70 python3 "$E/gemm_small_m.py" "$R/gemm_small_m_h100_run$i.csv"; done
  step emb_bwd 130 python3 "$E/embedding_backward.py" measure "$R/emb_bwd"
else
  step dense_step 60 python3 "$E/dlrm_dense_step.py" measure "$R/dense_step"
  step dense_ew 50 python3 "$E/dense_ew_kernels.py" measure "$R/dense_ew"
  step async_wgrad 40 python3 "$E/async_wgrad.py" measure "$R/async_wgrad"
  step emb_bwd 60 python3 "$E/embedding_backward.py" measure "$R/emb_bwd"
  step concat 200 python3 "$E/dense_ew_kernels.py" measure-concat "$R/dense_ew"
fi
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$OUT/machine.txt"
tar czf "$OUT/results.tar.gz" -C "$R" . && rm -rf "$R"
