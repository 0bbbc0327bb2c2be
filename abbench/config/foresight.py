"""What ``run`` would hit after the servers start, said by ``validate`` before: an
endpoint the preset lacks, a context longer than the server's, a model file that
is not there. Read from the start command alone; nothing is started."""

from __future__ import annotations

import shutil
from pathlib import Path

from abbench.config.arms import ResolvedArm, placeholder_values, resolve_arms
from abbench.config.infer import SEE_REFUSED, flag_value, see, server_word
from abbench.config.schema import Config, ConfigError
from abbench.config.values import format_context
from abbench.errors import clip_repr

#: the model flags of each preset's server, and whether the value must be a file
#: (llama.cpp loads a GGUF file; vLLM and SGLang also take a Hugging Face id)
MODEL_FLAGS: dict[str, tuple[tuple[str, ...], bool]] = {
    "llama.cpp": (("-m", "--model"), True),
    "vllm": (("--model",), False),
    "sglang": (("--model-path", "--model"), False),
}


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def server_context(preset: str, words: list[str]) -> tuple[int, str, str] | None:
    """The longest prompt + decode one request may have on this server, from its
    flags: (tokens, the flags it comes from, how to allow ``need`` more, with
    ``{need}`` in it); None when the flags do not say (the model's own length applies).

    llama.cpp: ``-c`` split over the ``-np`` slots (each slot has ``c / np``), unless
    ``--kv-unified`` shares one cache; without ``-np`` the server picks its slots
    and a unified cache. vLLM: ``--max-model-len``. SGLang: ``--context-length``."""
    if preset == "llama.cpp":
        c = _int(flag_value(words, "-c", "--ctx-size"))
        if not c:  # absent or 0: the model's trained length
            return None
        np_ = _int(flag_value(words, "-np", "--parallel"))
        if np_ and np_ > 1 and not {"-kvu", "--kv-unified"} & set(words):
            return (c // np_, f"-c {c} over -np {np_} slots",
                    f"-c to at least {np_} x {{need}} ({np_} slots), or use fewer slots")
        return c, f"-c {c}", "-c to at least {need}"
    for name, flag in (("vllm", "--max-model-len"), ("sglang", "--context-length")):
        n = _int(flag_value(words, flag)) if preset == name else None
        if n:
            return n, f"{flag} {n}", f"{flag} to at least {{need}}"
    return None


def _longest(cfg: Config) -> tuple[int, str]:
    """The longest request the workloads make, and which one."""
    best, what = 0, ""
    for w in cfg.workloads:
        if w.load is not None:
            n = w.load.prompt_tokens + w.load.output_tokens
            label = (f"{w.title}: {format_context(w.load.prompt_tokens)} prompt + "
                     f"{w.load.output_tokens} output tokens")
        elif w.contexts:
            n = max(w.contexts) + w.decode_tokens
            label = (f"{w.title}: context {format_context(max(w.contexts))} + "
                     f"{w.decode_tokens} decode tokens")
        else:
            continue
        if n > best:
            best, what = n, label
    return best, what


def program_here(arm: ResolvedArm, prog: str) -> bool:
    """Whether ``prog`` (a start command's first word) is on this machine."""
    if "/" not in prog:
        return shutil.which(prog) is not None
    p = Path(prog) if Path(prog).is_absolute() else Path(arm.cwd) / prog
    return p.is_file()


def foresee(cfg: Config, arm: ResolvedArm, *, where: str, strict: bool) -> list[str]:
    """Raise :class:`ConfigError` for what would fail once ``arm``'s server runs;
    return warnings. A missing model file is an error when ``strict`` (run) or when
    the program is on this machine, else a warning (validate on another machine)."""
    if not arm.tokenize_path and cfg.workloads:
        raise ConfigError(
            f"preset {arm.preset} has no tokenize endpoint, which the workloads need to "
            "build prompts of exact length", where=f"{where}.preset",
            hint="write the server's preset (preset: llama.cpp, vllm or sglang), or give "
                 "tokenize_path: (e.g. /tokenize)" + see("arms"))
    if arm.shell:
        return []
    words = arm.command(placeholder_values(cfg, arm, port=1, round_=0))
    found = server_word(words)
    if found is not None and found[1] == "llama.cpp":  # its flags, not a wrapper's
        words = words[found[0]:]
    limit = server_context(arm.preset, words)
    need, what = _longest(cfg)
    if limit is not None and need > limit[0]:
        n, said, fix = limit
        raise ConfigError(
            f"{what} = {need} tokens, more than the {n} a request may have on this server "
            f"({said})", where=f"{where}.start",
            hint=f"raise {fix.format(need=need)}; or use shorter contexts{SEE_REFUSED}")
    model_flags, must_be_file = MODEL_FLAGS.get(arm.preset, ((), False))
    model = flag_value(words, *model_flags) if model_flags else None
    if model is None:
        return []
    looks_like_path = must_be_file or model.startswith(("/", "./", "../", "~"))
    p = Path(model).expanduser()
    if not p.is_absolute():
        p = Path(arm.cwd) / p
    if not looks_like_path or p.exists():
        return []
    msg = f"model {clip_repr(model)} does not exist" + (
        " (relative to cwd:, by default the arms file's folder)"
        if not Path(model).expanduser().is_absolute() else "")
    # a llama-server here loads its model here; `python -m vllm...` may not be the
    # python that serves (validate on another machine): a warning then
    if strict or (arm.preset == "llama.cpp" and program_here(arm, words[0])):
        raise ConfigError(msg, where=f"{where}.start", hint="fix the path (check vars: and "
                          "the file name), or download the model first" + SEE_REFUSED)
    return [f"{where}.start: {msg} here (fine if the servers run elsewhere)"]


def model_path(cfg: Config, arm: ResolvedArm) -> Path | None:
    """The model file ``arm``'s start command names (by its preset's model flag),
    resolved against its cwd; None when it names none (or is a shell string)."""
    flags, _ = MODEL_FLAGS.get(arm.preset, ((), False))
    if arm.shell or not flags:
        return None
    try:
        words = arm.command(placeholder_values(cfg, arm, port=1, round_=0))
    except ConfigError:
        return None
    model = flag_value(words, *flags)
    if model is None:
        return None
    p = Path(model).expanduser()
    return p if p.is_absolute() else Path(arm.cwd) / p


def model_files(cfg: Config) -> dict[str, dict[str, object]]:
    """Per arm, its model file's path and size in bytes (for the report's setup
    line); an arm whose model is no file here (a Hugging Face id) is left out."""
    out: dict[str, dict[str, object]] = {}
    for arm in resolve_arms(cfg):
        p = model_path(cfg, arm)
        if p is not None and p.is_file():
            out[arm.name] = {"path": str(p), "bytes": p.stat().st_size}
    return out
