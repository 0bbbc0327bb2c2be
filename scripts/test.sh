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
# Two workers (pytest-xdist): the real-server tests in one, one at a time; the rest in
# the other (tests/conftest.py groups them). -n 0 runs everything in one process.
exec .venv/bin/python -m pytest -q -n "${ABBENCH_TEST_WORKERS:-2}" --dist loadgroup "$@"
