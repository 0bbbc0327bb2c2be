"""Write a GGUF with the exact shape of a real model and random weights.

The file is a llama-architecture GGUF in the shape of a named model (layers,
widths, heads, context, RoPE), filled with seeded random weights and quantized
to Q8_0 or Q4_0, with SmolLM2-135M-Instruct's tokenizer and chat template copied
from its GGUF. A server decodes it at the speed and memory of the real shape;
what it says is meaningless. See docs/synthetic-model.md.

The vocabulary is the tokenizer's (SmolLM2: 49,152 tokens), not the real model's
(Llama 3: 128,256), so token_embd and output are smaller than the real ones;
``--plan`` prints the parameter count both ways.

Memory stays bounded: the header and tensor infos are written first, then each
tensor in row chunks of about 4M values, each chunk generated, quantized and
written on its own (several at a time with ``--jobs``). Every chunk has its own
seed (the run's seed, the tensor's index, the chunk's index), so the file does
not depend on ``--jobs``: the same arguments give the same bytes.

    python scripts/synthetic_gguf.py --shape llama-3.1-8b --quant q4_0 --seed 0 \\
        --out /tmp/llama-3.1-8b-synthetic.q4_0.gguf [--tokenizer-from SMOLLM2.gguf]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import multiprocessing
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf.quants import quantize

#: Values per generated chunk (a chunk is whole rows): 16 MiB of float32.
CHUNK_VALUES = 1 << 22
#: Standard deviation of the weight matrices; norm weights are 1.
WEIGHT_STD = 0.02
QUANTS = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
FILE_TYPES = {"q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0}


@dataclass(frozen=True)
class Shape:
    """The hyperparameters of a llama-architecture model (those of its config.json)."""

    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    rope_theta: float
    n_ctx: int
    tied: bool
    real_vocab: int
    rms_eps: float = 1e-5
    # Llama 3 RoPE scaling (factor, low_freq_factor, high_freq_factor, original
    # context): written as the rope_freqs.weight tensor, as convert_hf_to_gguf does.
    rope_scaling: tuple[float, float, float, int] | None = None
    source: str = ""

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


SHAPES: dict[str, Shape] = {
    "llama-3.1-8b": Shape(n_layer=32, n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8,
                          rope_theta=500000.0, n_ctx=131072, tied=False, real_vocab=128256,
                          rope_scaling=(8.0, 1.0, 4.0, 8192),
                          source="meta-llama/Llama-3.1-8B-Instruct"),
    "llama-3.2-1b": Shape(n_layer=16, n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8,
                          rope_theta=500000.0, n_ctx=131072, tied=True, real_vocab=128256,
                          rope_scaling=(32.0, 1.0, 4.0, 8192),
                          source="meta-llama/Llama-3.2-1B-Instruct"),
    "llama-3.1-70b": Shape(n_layer=80, n_embd=8192, n_ff=28672, n_head=64, n_head_kv=8,
                           rope_theta=500000.0, n_ctx=131072, tied=False, real_vocab=128256,
                           rope_scaling=(8.0, 1.0, 4.0, 8192),
                           source="meta-llama/Llama-3.1-70B-Instruct"),
    # For tests: a few MB, decodes in milliseconds on one thread.
    "tiny": Shape(n_layer=2, n_embd=64, n_ff=256, n_head=4, n_head_kv=2, rope_theta=10000.0,
                  n_ctx=2048, tied=False, real_vocab=49152, source="none (test shape)"),
}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows = out features, cols = in features)
    kind: str  # "matrix" (random, quantized), "norm" (ones, F32), "rope_freqs" (F32)

    @property
    def n_values(self) -> int:
        return math.prod(self.shape)


def tensor_plan(shape: Shape, vocab: int) -> list[TensorSpec]:
    """The tensors of ``shape`` with ``vocab`` tokens, in file order, with the names
    and shapes llama.cpp's llama architecture loads."""
    e, hd = shape.n_embd, shape.head_dim
    plan = [TensorSpec("token_embd.weight", (vocab, e), "matrix")]
    if shape.rope_scaling is not None:
        plan.append(TensorSpec("rope_freqs.weight", (hd // 2,), "rope_freqs"))
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        plan += [
            TensorSpec(b + "attn_norm.weight", (e,), "norm"),
            TensorSpec(b + "attn_q.weight", (shape.n_head * hd, e), "matrix"),
            TensorSpec(b + "attn_k.weight", (shape.n_head_kv * hd, e), "matrix"),
            TensorSpec(b + "attn_v.weight", (shape.n_head_kv * hd, e), "matrix"),
            TensorSpec(b + "attn_output.weight", (e, shape.n_head * hd), "matrix"),
            TensorSpec(b + "ffn_norm.weight", (e,), "norm"),
            TensorSpec(b + "ffn_gate.weight", (shape.n_ff, e), "matrix"),
            TensorSpec(b + "ffn_up.weight", (shape.n_ff, e), "matrix"),
            TensorSpec(b + "ffn_down.weight", (e, shape.n_ff), "matrix"),
        ]
    plan.append(TensorSpec("output_norm.weight", (e,), "norm"))
    if not shape.tied:  # tied: llama.cpp uses token_embd as the output matrix
        plan.append(TensorSpec("output.weight", (vocab, e), "matrix"))
    return plan


def parameter_count(plan: list[TensorSpec]) -> int:
    """Parameters as Hugging Face counts them (rope_freqs is a buffer, not a weight)."""
    return sum(t.n_values for t in plan if t.kind != "rope_freqs")


def rope_freqs(shape: Shape) -> np.ndarray:
    """Llama 3's per-frequency RoPE factors (as convert_hf_to_gguf computes them)."""
    assert shape.rope_scaling is not None
    factor, low, high, old_ctx = shape.rope_scaling
    dim = shape.head_dim
    freqs = 1.0 / (shape.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def chunk_rows(spec: TensorSpec) -> int:
    return max(1, CHUNK_VALUES // spec.shape[-1])


def n_chunks(spec: TensorSpec) -> int:
    return -(-spec.shape[0] // chunk_rows(spec))


def make_chunk(seed: int, t_index: int, c_index: int, rows: int, cols: int, qtype: int) -> bytes:
    """Rows of one matrix: normal(0, WEIGHT_STD) from their own PCG64 stream, quantized."""
    ss = np.random.SeedSequence(seed, spawn_key=(t_index, c_index))
    rng = np.random.Generator(np.random.PCG64(ss))
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    x *= np.float32(WEIGHT_STD)
    return quantize(x, gguf.GGMLQuantizationType(qtype)).tobytes()


def nbytes(spec: TensorSpec, qtype: gguf.GGMLQuantizationType) -> int:
    if spec.kind != "matrix":
        return 4 * spec.n_values
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return spec.shape[0] * (spec.shape[1] // block) * size


def read_tokenizer(path: Path) -> tuple[list[tuple[str, Any, gguf.GGUFValueType,
                                                   gguf.GGUFValueType | None]], int]:
    """The ``tokenizer.*`` keys of a GGUF (tokenizer.ggml.*, tokenizer.chat_template)
    as (key, value, type, array item type), and its vocabulary size."""
    reader = gguf.GGUFReader(path)
    keys = []
    vocab = 0
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        keys.append((field.name, value, vtype, sub))
        if field.name == "tokenizer.ggml.tokens":
            vocab = len(value)
    if not vocab:
        raise SystemExit(f"{path}: no tokenizer.ggml.tokens")
    return keys, vocab


def tensor_bytes(plan: list[TensorSpec], shape: Shape, seed: int,
                 qtype: gguf.GGMLQuantizationType, jobs: int) -> Iterator[tuple[int, bytes]]:
    """(tensor index, bytes) pieces in file order; matrices come in chunks, made by
    ``jobs`` processes with at most 2 x jobs chunks in flight."""
    tasks: list[tuple[int, int, int, int]] = []  # (tensor, chunk, rows, cols)
    for i, spec in enumerate(plan):
        if spec.kind == "matrix":
            step = chunk_rows(spec)
            for c in range(n_chunks(spec)):
                rows = min(step, spec.shape[0] - c * step)
                tasks.append((i, c, rows, spec.shape[1]))

    def small(i: int) -> bytes:
        spec = plan[i]
        if spec.kind == "norm":
            return np.ones(spec.shape, dtype=np.float32).tobytes()
        return rope_freqs(shape).tobytes()

    # fork: workers need not re-import this script (it is no package module).
    ctx = multiprocessing.get_context(
        "fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    pool = ProcessPoolExecutor(jobs, mp_context=ctx) if jobs > 1 else None
    try:
        pending: deque[tuple[int, Future[bytes] | bytes]] = deque()
        todo = iter(tasks)
        next_small = 0

        def submit() -> bool:
            task = next(todo, None)
            if task is None:
                return False
            i, c, rows, cols = task
            args = (seed, i, c, rows, cols, int(qtype))
            pending.append((i, pool.submit(make_chunk, *args) if pool else make_chunk(*args)))
            return True

        while len(pending) < 2 * jobs and submit():
            pass
        while pending:
            i, fut = pending.popleft()
            for j in range(next_small, i):  # norms and rope_freqs before this matrix
                if plan[j].kind != "matrix":
                    yield j, small(j)
            next_small = max(next_small, i + 1)
            data = fut.result() if isinstance(fut, Future) else fut
            submit()
            yield i, data
        for j in range(next_small, len(plan)):
            if plan[j].kind != "matrix":
                yield j, small(j)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def write(shape_name: str, quant: str, seed: int, out: Path, tokenizer: Path, jobs: int,
          layers: int | None = None) -> dict[str, Any]:
    """Write the file (to ``out``.tmp, then renamed); returns a summary."""
    t0 = time.perf_counter()
    shape = SHAPES[shape_name]
    if layers is not None:  # timing runs: the first ``layers`` blocks only
        shape = dataclasses.replace(shape, n_layer=layers)
    qtype = QUANTS[quant]
    tok_keys, vocab = read_tokenizer(tokenizer)
    plan = tensor_plan(shape, vocab)

    w = gguf.GGUFWriter(None, "llama")
    w.add_name(f"synthetic {shape_name}" + (f" ({layers} layers)" if layers is not None else ""))
    w.add_type("model")
    w.add_description(
        f"Random weights (normal, std {WEIGHT_STD}, seed {seed}) in the shape of "
        f"{shape.source}, vocabulary and chat template of SmolLM2-135M-Instruct; "
        "written by abbench scripts/synthetic_gguf.py. Outputs are meaningless.")
    w.add_file_type(int(FILE_TYPES[quant]))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_vocab_size(vocab)
    w.add_context_length(shape.n_ctx)
    w.add_embedding_length(shape.n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head_kv)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_rope_dimension_count(shape.head_dim)
    for key, value, vtype, sub in tok_keys:
        w.add_key_value(key, value, vtype, sub_type=sub)
    for spec in plan:
        if spec.kind == "matrix":
            w.add_tensor_info(spec.name, spec.shape, np.dtype(np.float32),
                              nbytes(spec, qtype), raw_dtype=qtype)
        else:
            w.add_tensor_info(spec.name, spec.shape, np.dtype(np.float32), nbytes(spec, qtype))

    tmp = out.with_name(out.name + ".tmp")
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        w.write_header_to_file(tmp)
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        assert w.fout is not None
        fout = w.fout[0]
        w.write_padding(fout, fout.tell())  # tensor data starts aligned
        written = [0] * len(plan)

        def finish(i: int) -> None:  # tensor i is complete: check its size, pad it
            if written[i] != nbytes(plan[i], qtype):
                raise RuntimeError(f"{plan[i].name}: {written[i]} bytes written, "
                                   f"{nbytes(plan[i], qtype)} planned")
            w.write_padding(fout, written[i], w.data_alignment)

        last = -1
        for i, data in tensor_bytes(plan, shape, seed, qtype, jobs):
            if i != last and last >= 0:
                finish(last)
            fout.write(data)
            written[i] += len(data)
            last = i
        finish(last)
        fout.flush()
        os.fsync(fout.fileno())
        w.close()
        os.replace(tmp, out)
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise
    return {"elapsed_s": time.perf_counter() - t0, "bytes": out.stat().st_size,
            "tensors": len(plan), "params": parameter_count(plan), "vocab": vocab}


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def print_plan(shape_name: str, vocab: int) -> None:
    shape = SHAPES[shape_name]
    plan = tensor_plan(shape, vocab)
    for t in plan[:12]:
        print(f"{t.name:28s} {t.shape!s:18s} {t.kind}")
    if len(plan) > 12:
        print(f"... {len(plan) - 12} more")
    print(f"{shape_name}: {len(plan)} tensors, {parameter_count(plan):,} parameters with "
          f"vocab {vocab:,}; {parameter_count(tensor_plan(shape, shape.real_vocab)):,} with "
          f"the real model's vocab {shape.real_vocab:,}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", required=True, choices=sorted(SHAPES))
    p.add_argument("--quant", default="q4_0", choices=sorted(QUANTS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    p.add_argument("--tokenizer-from", type=Path, default=os.environ.get("SMOLLM2_GGUF"),
                   help="GGUF whose tokenizer.* keys are copied (default: $SMOLLM2_GGUF)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes generating chunks (the file does not depend on it)")
    p.add_argument("--layers", type=int, help="write only the first N blocks (timing runs)")
    p.add_argument("--plan", action="store_true", help="print the tensor plan; write nothing")
    p.add_argument("--sha256", action="store_true", help="print the file's sha256")
    a = p.parse_args(argv)
    if a.plan:
        vocab = read_tokenizer(a.tokenizer_from)[1] if a.tokenizer_from else 49152
        print_plan(a.shape, vocab)
        return 0
    if a.out is None:
        p.error("--out is required")
    if a.tokenizer_from is None:
        p.error("--tokenizer-from or $SMOLLM2_GGUF is required (bash scripts/realparts.sh)")
    # SIGTERM unwinds like Ctrl-C, so that the partial OUT.tmp is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    r = write(a.shape, a.quant, a.seed, a.out, a.tokenizer_from, max(1, a.jobs), a.layers)
    print(f"{a.out}: {r['bytes']:,} bytes ({r['bytes'] / 2**30:.2f} GiB), {r['tensors']} "
          f"tensors, {r['params']:,} parameters (vocab {r['vocab']:,}), "
          f"{r['elapsed_s']:.1f} s with {a.jobs} job(s)")
    if a.sha256:
        print(f"sha256 {sha256(a.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
