"""Greedy-output fingerprints of named prompt sets, per arm and round.

A prompt set is decoded at temperature 0 with a fixed ``max_tokens``; its
fingerprint is the first 16 hex digits of SHA-256 over the outputs in order (each
output's UTF-8 bytes prefixed by their length, so that no two lists of outputs
share a byte stream). The cold pass is the first requests after the server starts;
a warm pass after the workloads is optional. Every output is stored as a
``fingerprint_output`` record, every pass as a ``fingerprint`` record.

Nonce prompt sets are generated: N prompts, each opening with a random nonce drawn
from a recorded seed (the run's seed by default), so that no two prompts share a
cacheable prefix, and every arm and round gets the very same prompts.
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from abbench.config.infer import see
from abbench.config.quality import FingerprintConfig, NonceSet, PromptItem, PromptSetRef
from abbench.config.schema import Config
from abbench.errors import ConfigError, Interrupted, RequestError, clip, clip_repr
from abbench.model.records import FingerprintOutput, FingerprintRecord, at
from abbench.quality.checks import load_item_file
from abbench.slot import SlotContext, SlotTask
from abbench.workload.decode import filler_text
from abbench.workload.greedy import generate


def fingerprint(outputs: list[str]) -> str:
    """First 16 hex digits of SHA-256 over the length-prefixed outputs, in order."""
    h = hashlib.sha256()
    for text in outputs:
        b = text.encode("utf-8")
        h.update(len(b).to_bytes(8, "big"))
        h.update(b)
    return h.hexdigest()[:16]


def nonce_prompts(spec: NonceSet, seed: int) -> list[tuple[PromptItem, str]]:
    """``spec.count`` text prompts, each opening with its own 64-bit nonce."""
    rng = random.Random(f"abbench-nonce:{seed}")
    out = []
    for i in range(spec.count):
        nonce = f"{rng.getrandbits(64):016x}"
        text = filler_text(spec.words, seed=rng.getrandbits(32))
        prompt = f"Note {nonce}. {text[0].upper()}{text[1:]}"
        out.append((PromptItem(id=f"n{i + 1}", prompt=prompt), nonce))
    return out


@dataclass
class PromptSet:
    """A resolved prompt set: its prompts (and nonces, for a generated set)."""

    name: str
    source: str
    max_tokens: int
    items: list[PromptItem]
    nonces: dict[str, str] = field(default_factory=dict)
    seed: int | None = None


#: the prompt sets abbench ships (basics, chat); prompts/ beside the arms file adds more
#: and overrides these by name
BUILTIN_SETS = Path(__file__).parent.parent / "data" / "prompts"
_SUFFIXES = (".yaml", ".yml", ".jsonl")


def _named(folder: Path, name: str) -> Path | None:
    for ext in _SUFFIXES:
        if (folder / f"{name}{ext}").exists() or (folder / f"{name}{ext}").is_symlink():
            return folder / f"{name}{ext}"
    return None


def set_names(cfg: Config) -> list[str]:
    """Every prompt set a name can pick: the built-in ones and the arms file's prompts/."""
    names = {p.stem for p in BUILTIN_SETS.iterdir() if p.suffix in _SUFFIXES}
    folder = cfg.base_dir / "prompts"
    if folder.is_dir():
        names |= {p.stem for p in folder.iterdir() if p.suffix in _SUFFIXES}
    return sorted(names)


def set_path(cfg: Config, ref: PromptSetRef, where: str = "fingerprints.sets") -> Path:
    """The file of a prompt set: its path, else prompts/NAME beside the arms file, else
    abbench's own set of that name."""
    if ref.path is not None:
        p = Path(ref.path)
        return p if p.is_absolute() else cfg.base_dir / p
    assert ref.name is not None
    found = _named(cfg.base_dir / "prompts", ref.name) or _named(BUILTIN_SETS, ref.name)
    if found is None:
        raise ConfigError(f"no prompt set named {clip_repr(ref.name, 80)} (not in "
                          f"{cfg.base_dir / 'prompts'}/, nor among abbench's own)", where=where,
                          hint=f"sets: {', '.join(set_names(cfg))}; or give a path to a "
                               "YAML/JSONL file of prompts" + see("fingerprints"))
    return found


def set_origin(cfg: Config, path: Path) -> str:
    """Where a named set comes from, for the plan: 'built-in' or the prompts/ file."""
    if path.parent == BUILTIN_SETS:
        return "built-in"
    shadowed = _named(BUILTIN_SETS, path.stem) is not None and path.parent == \
        cfg.base_dir / "prompts"
    return f"{path}{', over the built-in one' if shadowed else ''}"


class FingerprintTask:
    """Decodes every prompt set greedily: ``cold`` right after start, else after the
    workloads (the warm pass)."""

    def __init__(self, cfg: Config, fc: FingerprintConfig, *, cold: bool):
        self.fc = fc
        self.cold = cold
        self.name = "fingerprints (cold)" if cold else "fingerprints (warm)"
        self.refs = fc.sets
        src = cfg.source or "arms file"
        self.files = {}
        for i, r in enumerate(self.refs):
            if r.nonce is None:
                where = f"{src}: fingerprints.sets[{i}]"
                path = set_path(cfg, r, where)
                self.files[i] = load_item_file(path, PromptItem, key="prompts", where=where,
                                               label=f"the prompt set {clip_repr(str(path))}")
        names = [r.name or self.files[i].name for i, r in enumerate(self.refs)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"prompt set names repeat: {clip(', '.join(dup))}",
                              where=f"{src}: fingerprints.sets",
                              hint="give each set its own name:" + see("fingerprints"))

    def sets(self, run_seed: int) -> list[PromptSet]:
        out = []
        for i, ref in enumerate(self.refs):
            if ref.nonce is not None:
                assert ref.name is not None
                seed = ref.nonce.seed if ref.nonce.seed is not None else run_seed
                made = nonce_prompts(ref.nonce, seed)
                out.append(PromptSet(ref.name, "nonce", self.fc.max_tokens or 32,
                                     [p for p, _ in made], {p.id or "": n for p, n in made},
                                     seed))
            else:
                f = self.files[i]
                out.append(PromptSet(ref.name or f.name, str(f.path),
                                     self.fc.max_tokens or f.max_tokens or 32, f.items))
        return out

    def run(self, ctx: SlotContext) -> None:
        run_seed = ctx.run_seed
        pass_ = "cold" if self.cold else "warm"
        base = {**at(ctx.slot), "pass": pass_}
        for ps in self.sets(run_seed):
            texts: list[str] = []
            errors: list[str] = []
            t0 = time.time()
            for i, item in enumerate(ps.items):
                if ctx.stop_event.is_set():
                    raise Interrupted("interrupted during the fingerprint prompts")
                max_tokens = item.max_tokens or ps.max_tokens
                rec: dict[str, object] = {**base, "type": "fingerprint_output",
                                          "set": ps.name, "id": item.id, "index": i,
                                          "max_tokens": max_tokens}
                if item.id in ps.nonces:
                    rec.update(nonce=ps.nonces[item.id or ""], prompt=item.prompt)
                try:
                    g = generate(ctx.client, prompt=item.prompt, messages=item.chat(),
                                 max_tokens=max_tokens, chat_path=self.fc.chat_path)
                    rec.update(text=g.text, tokens=g.tokens,
                               completion_tokens=g.completion_tokens,
                               finish_reason=g.finish_reason)
                    texts.append(g.text)
                except RequestError as e:
                    rec.update(text=None, error=str(e))
                    errors.append(f"{item.id}: {e.message}")
                ctx.record(FingerprintOutput.model_validate(rec))
            ctx.record(FingerprintRecord.model_validate({
                **base, "type": "fingerprint", "set": ps.name, "source": ps.source, "t": t0,
                "prompts": len(ps.items), "max_tokens": ps.max_tokens, "seed": ps.seed,
                "fingerprint": None if errors else fingerprint(texts), "errors": errors}))


def fingerprint_tasks(cfg: Config) -> list[SlotTask]:
    """The cold (and, with ``warm: true``, warm) fingerprint passes ``fingerprints:``
    asks for (abbench.tasks entry ``fingerprints``)."""
    fp = cfg.fingerprints
    if fp is None:
        return []
    tasks: list[SlotTask] = [FingerprintTask(cfg, fp, cold=True)]
    if fp.warm:
        tasks.append(FingerprintTask(cfg, fp, cold=False))
    return tasks
