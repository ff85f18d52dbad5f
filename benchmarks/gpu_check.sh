#!/usr/bin/env bash
# GPU check (issue #21): bash benchmarks/gpu_check.sh [OUT_DIR] [gpu_check.py options, e.g. --bf16 --steps 20]
cd "$(dirname "$0")/.." && exec python benchmarks/gpu_check.py --out "${1:-gpu_check_out}" "${@:2}"
