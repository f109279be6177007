#!/usr/bin/env bash
# One-GPU check (about 8 minutes on one H200): the CUDA tests, bf16 + torch.compile throughput and MFU
# of 150m / 300m / 600m at seq_len 4096 over micro-batches 1-16, and a short gpu-small-shaped run.
# Prints a table last; results land in benchmarks/results/gpu-*.json (or $OUT if set).
# Usage: bash benchmarks/gpu_check.sh        (from the repository root, with the package installed)
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA GPU visible to torch; nothing to check (run this on a GPU machine)"
    exit 0
fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 REPRO_PRESET=smoke
results="${OUT:-benchmarks/results}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

echo "== 1/3 CUDA tests"
timeout 180 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py tests/test_model.py 2>&1 | tail -5

echo "== 2/3 bf16 + torch.compile throughput, seq_len 4096, micro-batches 1-16"
timeout 300 python3 -m repro.cli bench throughput --models 150m,300m,600m --vocab-size 128256 --seq-len 4096 \
    --micro-batches 1,2,4,8,16 --compile --out "$results" --name gpu-throughput | tee "$work/throughput.txt"

echo "== 3/3 gpu-small-shaped run (150m, seq 1024, bf16, compiled) on a 2M-token synthetic pool"
timeout 150 python3 -m repro.cli data build --source synthetic --tokens 2M --val-tokens 100k --vocab-size 8192 \
    --out "$work/pool" --quiet
timeout 150 python3 -m repro.cli train --pool "$work/pool" --out "$work/run" --quiet model=150m seq_len=1024 \
    batch_size=32 micro_batch=16 epochs=1 eval_every=0.5 device=cuda compile=true
python3 - "$work/run" <<'PY'
import json, sys
status = json.load(open(f"{sys.argv[1]}/status.json"))
print(f"gpu-small-shaped run: {status['status']}, {status['step']} steps in {status['wall_s']:.0f} s, best val loss {status['best_val_loss']:.3f}")
PY
echo "== table (bf16, torch.compile, seq_len 4096)"
grep -A100 "^model" "$work/throughput.txt"
