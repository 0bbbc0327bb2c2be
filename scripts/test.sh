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
# Two workers (pytest-xdist), each taking the next test as it frees, but the tests of
# one xdist_group on one worker (the 30-run history is made once; the llama.cpp git
# builds and vLLM's campaign, which want both cores, one after another); -n 0 after the
# script's name (or ABBENCH_TEST_WORKERS=0) runs everything in one process, in order.
# The 20 slowest tests are listed at the end (the budget: docs/development.md).
exec .venv/bin/python -m pytest -q -n "${ABBENCH_TEST_WORKERS:-2}" --dist loadgroup \
  --durations=20 "$@"
