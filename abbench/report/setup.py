"""What was compared, said with the table: the setup line (server, model, machine,
rounds, order, seed), each arm's differences from the baseline (flags, environment,
commit), as compare-llama-bench adds every differing parameter, and a one-line
summary of what changed (:mod:`.summary`). Data here (frozen), carried whole in
report.json; :mod:`abbench.report.markdown` puts it in words."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any

from abbench.model.metrics import spec
from abbench.model.records import Record, Sample
from abbench.model.runmeta import Environment, RunMeta

#: memory peaks a server life shows as it ends
_PEAKS = ("peak_vram_mib", "peak_rss_mib")
#: start-command flags every arm has with its own value (not a difference)
_PER_LIFE = {"--port", "--host"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?")


@dataclass(frozen=True)
class Setup:
    """The run's setup, one line under the header."""

    server: str | None  # "llama.cpp (llama-server)"
    model: str | None  # "llama-3.1-8b.q4_0.gguf, Q4_0, 4.3 GiB"
    machine: str  # "1x NVIDIA H200 (driver 580.159.04)" or "CPU: ..."
    rounds: int | None
    reps: int
    order: str
    seed: int | None


@dataclass(frozen=True)
class ArmDiff:
    """How one arm's start differs from the baseline's."""

    arm: str
    flags: tuple[str, ...]
    env: tuple[str, ...]
    commit: str | None


@dataclass(frozen=True)
class RunSetup:
    setup: Setup
    baseline: str
    diffs: tuple[ArmDiff, ...]


def _pairs(argv: list[str]) -> dict[str, str | None]:
    """``[-c, 4096, --metrics, -fa, on]`` -> ``{-c: 4096, --metrics: None, -fa: on}``;
    words before the first flag (the program, ``serve MODEL``) under ``""``."""
    out: dict[str, str | None] = {}
    key = ""
    lead: list[str] = []
    for w in argv:
        is_flag = w.startswith("-") and not _NUMBER.fullmatch(w)
        if is_flag:
            key = w.split("=", 1)[0]
            out[key] = w.split("=", 1)[1] if "=" in w else None
        elif key:
            out[key] = w if out.get(key) is None else f"{out[key]} {w}"
        else:
            lead.append(w)
    out[""] = " ".join(lead)
    return out


def fill_vars(text: str, vars_: dict[str, Any]) -> str:
    """``{name}`` placeholders of ``vars:`` filled in (others left as they are)."""
    return re.sub(r"\{([A-Za-z_]\w*)\}", lambda m: str(vars_.get(m.group(1), m.group(0))), text)


def flag_diffs(base: list[str], other: list[str]) -> tuple[str, ...]:
    """``-ub 4096 (was 2048)``, ``--cache-type-k q8_0`` (added), ``no --metrics``."""
    a, b = _pairs(base), _pairs(other)
    out = []
    if a.get("") != b.get(""):
        out.append(f"program {b['']} (was {a['']})")
    for k, v in b.items():
        if not k or k in _PER_LIFE:
            continue
        if k not in a:
            out.append(f"{k} {v}" if v is not None else k)
        elif a[k] != v:
            out.append(f"{k} {v} (was {a[k]})")
    out += [f"no {k}" for k in a if k and k not in b and k not in _PER_LIFE]
    return tuple(out)


def _size(n: int) -> str:
    gib = n / 1024**3
    return f"{gib:.1f} GiB" if gib >= 1 else f"{n / 1024**2:.0f} MiB"


def _model(meta: RunMeta, base: str) -> str | None:
    m = meta.models.get(base)
    props = meta.servers.get(base) or {}
    path = (m.path if m is not None else None) or props.get("model_path")
    if not path:
        return None
    parts = [PurePath(str(path)).name]
    if props.get("model_ftype"):
        parts.append(str(props["model_ftype"]))
    if m is not None and m.bytes is not None:
        parts.append(_size(m.bytes))
    return ", ".join(parts)


def _machine(meta: RunMeta) -> str:
    env = meta.environment or Environment()
    if env.gpu_summary:
        return env.gpu_summary
    cpu = env.cpu or "unknown CPU"
    count = f", {env.cpu_count} cores" if env.cpu_count else ""
    return f"CPU only: {cpu}{count}"


def run_setup(meta: RunMeta, config: dict[str, Any] | None,
              baseline: str) -> RunSetup:
    """The setup of a run from its run.json (``meta``) and stored config.yaml."""
    arms = {a.get("name"): a for a in (config or {}).get("resolved_arms") or []
            if isinstance(a, dict)}
    vars_ = (config or {}).get("vars") or {}
    labels = meta.labels
    commits: dict[str | None, str | None] = {a.name: a.commit for a in meta.arms}
    base = arms.get(baseline) or {}
    server = None
    if base:
        program = PurePath(fill_vars(str((base.get("argv") or ["?"])[0]), vars_)).name
        server = f"{base.get('preset', '?')} ({program})"
    setup = Setup(server=server, model=_model(meta, baseline), machine=_machine(meta),
                  rounds=meta.rounds_shown, reps=meta.reps, order=meta.order or "?",
                  seed=meta.seed)
    diffs = []
    for name, arm in arms.items():
        if name == baseline or not base:
            continue
        fill = [fill_vars(str(w), vars_) for w in arm.get("argv") or []]
        flags = flag_diffs([fill_vars(str(w), vars_) for w in base.get("argv") or []], fill)
        benv, aenv = base.get("env") or {}, arm.get("env") or {}
        env = tuple([f"{k}={v}" for k, v in aenv.items() if benv.get(k) != v]
                    + [f"no {k}" for k in benv if k not in aenv])
        commit = commits.get(name) if commits.get(name) != commits.get(baseline) else None
        diffs.append(ArmDiff(labels.get(str(name), str(name)), flags, env, commit))
    return RunSetup(setup, labels.get(baseline, baseline), tuple(diffs))


def life_line(records: list[Record], arm: str, round_: int) -> str | None:
    """What one server life measured, for the progress display as it ends:
    ``decode 1K 259.6 tok/s, decode 4K 255.1 tok/s; peak VRAM 38730 MiB``."""
    rates: dict[str, list[float]] = {}
    peaks: dict[str, float] = {}
    for r in records:
        if not isinstance(r, Sample) or r.arm != arm or r.round != round_ or not r.valid:
            continue
        for metric, value in r.metrics.items():
            if value is None or not math.isfinite(value):
                continue
            if metric == "decode_tok_s":
                rates.setdefault(r.workload, []).append(value)
            elif metric in _PEAKS:
                peaks[metric] = max(peaks.get(metric, 0.0), value)
    parts = [f"{w} {statistics.mean(v):.1f} tok/s" for w, v in rates.items()]
    mem = [f"{spec(m).label} {v:.0f} MiB" for m, v in peaks.items()]
    if not parts and not mem:
        return None
    return ", ".join(parts) + ("; " if parts and mem else "") + ", ".join(mem)
