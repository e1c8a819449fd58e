#!/bin/bash
# The issue-12 sixth-pass H200 campaign in one device call (inside the 10-minute call limit):
#   bash experiments/gpu_campaigns/h200_v5_campaign.sh
# heldout5 (seed 2029, three times heldout4's shapes per family, every shape on 2 fresh allocations) first, then
# v5 (sub-wave embedding chains, bf16 GEMV below a wave).
# Writes under $OUT: machine.txt and one folder per campaign (campaign.csv.gz, traces.csv.gz, log.txt).
# Run from a folder that holds simfuse/ and experiments/ (the script puts that folder on PYTHONPATH).
set -u
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$HERE PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/simfuse_v5}
mkdir -p "$OUT"
{ date -u +%Y-%m-%dT%H:%M:%SZ; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))'
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
C="python3 $HERE/experiments/gpu_campaigns/trace_campaign.py"
$C --grid heldout --seed 2029 --heldout-scale 3 --repeats 2 --budget-s 170 --out "$OUT/heldout5"
$C --grid v5 --budget-s 290 --out "$OUT/v5"
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$OUT/machine.txt"
