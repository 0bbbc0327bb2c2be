#!/usr/bin/env bash
# The demo: set everything up, then a real A/B of two llama-server configurations
# (arms/llama-cpu.yaml), printing the markdown table. Extra arguments go to
# `abbench run` (e.g. --rounds 4).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/setup.sh)"
export LLAMA_SERVER SMOLLM2_GGUF
exec .venv/bin/abbench run arms/llama-cpu.yaml "$@"
