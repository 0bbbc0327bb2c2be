#!/usr/bin/env bash
# The test command: set everything up (first time: ~6 min to build llama-server on
# 2 cores; cached after), then run the whole suite, real-server tests included.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bash scripts/setup.sh)"
export LLAMA_SERVER SMOLLM2_GGUF
.venv/bin/ruff check abbench tests benchmarks
.venv/bin/lint-imports
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -q "$@"
