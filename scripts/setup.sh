#!/usr/bin/env bash
# Create .venv with abbench (editable) and its test tools, and build/fetch the real
# parts (llama-server, SmolLM2 GGUF) into the cache. Idempotent and quick when done.
# Prints LLAMA_SERVER=... and SMOLLM2_GGUF=... on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
# the real parts build (minutes, cold) while pip installs: neither waits for the other.
# Whatever ends set-up, the build is waited for (never left running behind it).
parts=$(mktemp)
trap 'wait || true; rm -f "$parts"' EXIT
PYTHON=.venv/bin/python bash scripts/realparts.sh >"$parts" &
building=$!
stamp=.venv/.abbench-installed
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  echo "setup: installing abbench and its dependencies into .venv" >&2
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]' >&2
  touch "$stamp"
fi
wait "$building"
cat "$parts"
