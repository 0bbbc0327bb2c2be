"""scripts/synthetic_gguf.py without the real parts: tensor plans and parameter counts
of the named shapes against the real models, and a tiny file (with a made-up
tokenizer) read back: tensor names, types, shapes, weight scale, and bytes that do
not depend on the number of processes."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import gguf  # a dev dependency (pyproject.toml): missing, this file fails, never skips
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("synthetic_gguf",
                                               ROOT / "scripts" / "synthetic_gguf.py")
assert _spec and _spec.loader
sg = importlib.util.module_from_spec(_spec)
sys.modules["synthetic_gguf"] = sg  # dataclasses look their module up
_spec.loader.exec_module(sg)

SMOLLM2_VOCAB = 49152


# Parameter counts of the real models (Hugging Face's count, 128,256-token vocab),
# and with SmolLM2's vocabulary, which the synthetic files carry.
@pytest.mark.parametrize("shape,real,with_smollm2_vocab", [
    ("llama-3.1-8b", 8_030_261_248, 7_382_241_280),
    ("llama-3.2-1b", 1_235_814_400, 1_073_809_408),
    ("llama-3.1-70b", 70_553_706_496, 69_257_666_560),
])
def test_parameter_counts_match_the_real_models(shape, real, with_smollm2_vocab):
    s = sg.SHAPES[shape]
    assert sg.parameter_count(sg.tensor_plan(s, s.real_vocab)) == real
    assert sg.parameter_count(sg.tensor_plan(s, SMOLLM2_VOCAB)) == with_smollm2_vocab


def test_llama_3_2_1b_plan_names_and_shapes():
    s = sg.SHAPES["llama-3.2-1b"]
    plan = {t.name: t for t in sg.tensor_plan(s, SMOLLM2_VOCAB)}
    assert len(plan) == 1 + 1 + 16 * 9 + 1  # embd, rope_freqs, 16 blocks, output_norm
    assert "output.weight" not in plan  # tied: llama.cpp reuses token_embd
    assert plan["token_embd.weight"].shape == (SMOLLM2_VOCAB, 2048)
    assert plan["rope_freqs.weight"].shape == (32,)  # head_dim 64 / 2
    for i in (0, 15):
        b = f"blk.{i}."
        assert plan[b + "attn_q.weight"].shape == (2048, 2048)
        assert plan[b + "attn_k.weight"].shape == (512, 2048)  # 8 KV heads x 64
        assert plan[b + "attn_v.weight"].shape == (512, 2048)
        assert plan[b + "attn_output.weight"].shape == (2048, 2048)
        assert plan[b + "ffn_gate.weight"].shape == (8192, 2048)
        assert plan[b + "ffn_up.weight"].shape == (8192, 2048)
        assert plan[b + "ffn_down.weight"].shape == (2048, 8192)
        assert plan[b + "attn_norm.weight"].shape == (2048,)
        assert plan[b + "ffn_norm.weight"].shape == (2048,)
    assert "blk.16.attn_q.weight" not in plan
    assert plan["output_norm.weight"].shape == (2048,)


def test_llama_3_1_8b_plan_is_untied_and_llama3_rope():
    s = sg.SHAPES["llama-3.1-8b"]
    plan = {t.name: t for t in sg.tensor_plan(s, SMOLLM2_VOCAB)}
    assert len(plan) == 1 + 1 + 32 * 9 + 1 + 1
    assert plan["output.weight"].shape == (SMOLLM2_VOCAB, 4096)
    assert plan["blk.31.attn_k.weight"].shape == (1024, 4096)
    assert plan["blk.31.ffn_down.weight"].shape == (4096, 14336)
    f = sg.rope_freqs(s)
    # Llama 3 scaling: high frequencies kept, low ones divided by the factor 8.
    assert f.shape == (64,) and f[0] == 1.0 and f[-1] == 8.0
    assert np.all(np.diff(f) >= 0)


def _fake_tokenizer(path: Path, n: int = 96) -> Path:
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(n)])
    w.add_token_types([1] * n)
    w.add_chat_template("{{ messages }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("quant", ["q4_0", "q8_0"])
def test_tiny_file_reads_back_and_does_not_depend_on_jobs(tmp_path, quant, monkeypatch):
    tok = _fake_tokenizer(tmp_path / "tok.gguf")
    # Small chunks, so that tensors span several chunks and processes.
    monkeypatch.setattr(sg, "CHUNK_VALUES", 1024)
    one = sg.write("tiny", quant, 7, tmp_path / "a.gguf", tok, jobs=1)
    sg.write("tiny", quant, 7, tmp_path / "b.gguf", tok, jobs=2)
    assert _sha(tmp_path / "a.gguf") == _sha(tmp_path / "b.gguf")
    assert not list(tmp_path.glob("*.tmp"))
    assert one["vocab"] == 96 and one["bytes"] == (tmp_path / "a.gguf").stat().st_size

    r = gguf.GGUFReader(tmp_path / "a.gguf")
    f = r.fields
    assert f["general.architecture"].contents() == "llama"
    assert f["llama.block_count"].contents() == 2
    assert f["llama.embedding_length"].contents() == 64
    assert f["llama.attention.head_count_kv"].contents() == 2
    assert f["llama.rope.dimension_count"].contents() == 16
    assert f["llama.vocab_size"].contents() == 96
    assert f["tokenizer.ggml.tokens"].contents()[:2] == ["t0", "t1"]
    assert f["tokenizer.chat_template"].contents() == "{{ messages }}"
    plan = sg.tensor_plan(sg.SHAPES["tiny"], 96)
    assert [t.name for t in r.tensors] == [t.name for t in plan]
    qtype = sg.QUANTS[quant]
    for t, spec in zip(r.tensors, plan, strict=True):
        assert tuple(int(x) for x in reversed(t.shape)) == spec.shape, t.name
        if spec.kind == "norm":
            assert t.tensor_type == gguf.GGMLQuantizationType.F32
            assert np.all(t.data == 1.0)
        else:
            assert t.tensor_type == qtype
            x = gguf.quants.dequantize(t.data, qtype)
            assert abs(float(x.std()) - sg.WEIGHT_STD) < 0.002, t.name
            assert np.isfinite(x).all()
    embd, out = r.tensors[0], r.tensors[-1]
    assert not np.array_equal(embd.data, out.data)  # every tensor has its own stream


def test_another_seed_gives_other_bytes(tmp_path):
    tok = _fake_tokenizer(tmp_path / "tok.gguf")
    sg.write("tiny", "q4_0", 0, tmp_path / "a.gguf", tok, jobs=1)
    sg.write("tiny", "q4_0", 1, tmp_path / "b.gguf", tok, jobs=1)
    assert _sha(tmp_path / "a.gguf") != _sha(tmp_path / "b.gguf")
    assert (tmp_path / "a.gguf").stat().st_size == (tmp_path / "b.gguf").stat().st_size
