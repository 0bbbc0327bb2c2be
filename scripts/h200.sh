#!/usr/bin/env bash
# The H200 proof of issue 4, in three steps run on the device machine (one GPU,
# no network). Everything lives under /tmp/ab there, so that it outlives the
# calls and the carried folder being replaced.
#   build    SRC PART1 WHEELS  copy abbench + the model's first half, start the CUDA
#                              build of llama-server in the background (setsid nohup)
#   campaign PART2             join the model, wait for the build, start the campaign
#                              (and nvidia-smi loggers) in the background; wait a while.
#                              ABBENCH_ARGS replaces the abbench command line (default:
#                              run arms/h200-flash-attn.yaml --plain), e.g. a calibrate
#   collect                    wait for the campaign; copy what it wrote to $OUT
# PKG: the folder holding abbench/, scripts/ and arms/ (copied to /tmp/ab/pkg).
set -uo pipefail
W=/tmp/ab
MODEL_SHA256=${MODEL_SHA256:-}
step=$1; shift
export PYTHONPATH=$W/site:$W/pkg PYTHONUNBUFFERED=1
export LLAMA_SERVER=$W/build/bin/llama-server SMOLLM2_GGUF=$W/SmolLM2-135M-Instruct.Q4_1.gguf

wait_for() {  # FILE SECONDS
  local i=0
  while [[ ! -f $1 && $i -lt $2 ]]; do sleep 5; i=$((i + 5)); done
  [[ -f $1 ]]
}

collect() {
  mkdir -p "$OUT"
  cp -f $W/run.log $W/smi-gpu.csv $W/smi-apps.csv "$OUT"/ 2>/dev/null
  local run
  run=$(ls -d $W/results/*/ 2>/dev/null | tail -1)
  if [[ -n $run ]]; then
    cp -f "$run/report.md" "$OUT"/ 2>/dev/null
    tar -czf "$OUT/run.tar.gz" -C "$(dirname "$run")" "$(basename "$run")"
  fi
  ls -la "$OUT"
}

case $step in
build)
  src=$1 part1=$2 wheels=$3 pkg=$4
  mkdir -p $W/pkg
  cp -r "$pkg"/abbench "$pkg"/scripts "$pkg"/arms $W/pkg/
  cp "$part1" $W/model.part1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target $W/site "$wheels"/*.whl || exit 1
  tar -xJf "$src" -C $W
  setsid nohup bash -c "cmake -S $W/llama.cpp -B $W/build -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_AVX2=ON \
    -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF \
    >$W/cmake.log 2>&1 && cmake --build $W/build --target llama-server -j 16 >$W/build.log 2>&1; \
    echo \$? >$W/build.rc" </dev/null >/dev/null 2>&1 &
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import abbench.cli, pynvml, psutil, prometheus_client, pydantic; print('imports ok', pydantic.VERSION)"
  ;;
campaign)
  part2=$1
  cat $W/model.part1 "$part2" >$SMOLLM2_GGUF
  sha256sum $SMOLLM2_GGUF
  if [[ -n $MODEL_SHA256 ]] && ! sha256sum $SMOLLM2_GGUF | grep -q "$MODEL_SHA256"; then
    echo "model checksum mismatch"; exit 1
  fi
  wait_for $W/build.rc 480 || { echo "build not done"; tail -5 $W/build.log; exit 1; }
  [[ $(cat $W/build.rc) == 0 ]] || { tail -30 $W/cmake.log $W/build.log; exit 1; }
  cd $W/pkg || exit 1
  setsid nohup bash -c "nvidia-smi --query-gpu=timestamp,memory.used,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv -lms 200 >$W/smi-gpu.csv 2>&1 & g=\$!; \
    nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv -lms 200 >$W/smi-apps.csv 2>&1 & a=\$!; \
    python3 -m abbench.cli ${ABBENCH_ARGS:-run arms/h200-flash-attn.yaml --plain} --results $W/results >$W/run.log 2>&1; \
    echo \$? >$W/run.rc; kill \$g \$a" </dev/null >/dev/null 2>&1 &
  wait_for $W/run.rc "${WAIT:-420}"
  tail -25 $W/run.log
  collect
  ;;
collect)
  wait_for $W/run.rc "${WAIT:-560}"
  tail -60 $W/run.log
  collect
  ;;
esac
