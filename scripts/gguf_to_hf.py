"""Turn a llama-family GGUF into a Hugging Face safetensors folder vLLM and SGLang load.

Usage: python gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype bfloat16]

transformers dequantizes the GGUF (``gguf_file=``, needs the ``gguf`` and
``accelerate`` packages), but refuses ``save_pretrained`` on a GGUF-loaded model,
so the folder is written by hand: the state dict without the tied ``lm_head``
(``tie_word_embeddings`` rebuilds it at load), the config without
``quantization_config`` and with ``architectures: [LlamaForCausalLM]`` (the
servers pick their model class from it), the generation config and the
tokenizer. Written into OUT_DIR.tmp, then renamed: OUT_DIR exists only complete.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    args = ap.parse_args(argv)

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    dtype = getattr(torch, args.dtype)
    gdir, gname = os.path.split(os.path.abspath(args.gguf))
    tmp = args.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)

    model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=dtype)
    config = model.config
    if config.architectures in (None, [], ["LlamaModel"]) and config.model_type == "llama":
        config.architectures = ["LlamaForCausalLM"]
    if not config.architectures:
        raise SystemExit(f"gguf_to_hf: no architectures for model_type {config.model_type!r}")

    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    if getattr(config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})

    cfg = config.to_dict()
    cfg.pop("quantization_config", None)
    cfg["dtype"] = args.dtype
    cfg.pop("torch_dtype", None)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")

    gen = model.generation_config if model.generation_config is not None \
        else GenerationConfig.from_model_config(config)
    gen.save_pretrained(tmp)

    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    tok.save_pretrained(tmp)

    shutil.rmtree(args.out, ignore_errors=True)
    os.replace(tmp, args.out)
    n = sum(v.numel() for v in state.values())
    print(f"gguf_to_hf: {len(state)} tensors, {n / 1e6:.1f}M parameters, {args.dtype}, "
          f"architectures {config.architectures} -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
