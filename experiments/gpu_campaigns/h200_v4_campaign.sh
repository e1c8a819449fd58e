#!/bin/bash
# The issue-12 fifth-pass H200 campaign in two device calls (each well inside the 10-minute call limit):
#   bash experiments/gpu_campaigns/h200_v4_campaign.sh 1   # heldout4 (seed 2028, every shape on 2 fresh allocations) + v4 shard 0/2
#   bash experiments/gpu_campaigns/h200_v4_campaign.sh 2   # v4 shard 1/2
# Writes under $OUT: machine_PART.txt and one folder per campaign (campaign.csv.gz, traces.csv.gz, log.txt).
# Run from a folder that holds simfuse/ and experiments/ (the script puts that folder on PYTHONPATH).
set -u
HERE=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONPATH=$HERE PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/simfuse_v4}
mkdir -p "$OUT"
PART=${1:?part 1 or 2}
{ date -u +%Y-%m-%dT%H:%M:%SZ; uname -r
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu --format=csv
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name(0))'
} >"$OUT/machine_$PART.txt" 2>&1
cat "$OUT/machine_$PART.txt"
C="python3 $HERE/experiments/gpu_campaigns/trace_campaign.py"
case $PART in
  1) $C --grid heldout --seed 2028 --repeats 2 --budget-s 150 --out "$OUT/heldout4"
     $C --grid v4 --shard 0/2 --budget-s 270 --out "$OUT/v4a" ;;
  2) $C --grid v4 --shard 1/2 --budget-s 330 --out "$OUT/v4b" ;;
  *) echo "part must be 1 or 2" >&2; exit 2 ;;
esac
date -u +%Y-%m-%dT%H:%M:%SZ | tee -a "$OUT/machine_$PART.txt"
