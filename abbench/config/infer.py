"""What an arms file leaves unsaid, read from what it does say: the server family
(preset) from the start command, and the closest field name to a misspelt key."""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any, get_args

from pydantic import BaseModel

#: the README section that documents the arms file (errors point at it)
README_ARMS = "README.md#the-arms-file"
#: the README section that lists the common refusals and their fixes
README_REFUSED = "README.md#when-a-file-is-refused"
#: the end of a hint about a refusal README lists (a field's: :func:`see`)
SEE_REFUSED = f" (see {README_REFUSED})"
#: where each top-level key of an arms file is documented, when not in README_ARMS
_DOCS = {"table": "docs/statistics.md", "stats": "docs/statistics.md",
         "collectors": "docs/collectors-and-presets.md", "sources": "docs/git-arms.md",
         "variants": "docs/git-arms.md", "quality": "docs/quality.md",
         "fingerprints": "docs/quality.md",
         "speculative": "docs/serving.md#speculative-decoding-per-prompt-set"}
#: where each kind of workload is documented (the decode workload: README_ARMS)
_WORKLOAD_DOCS = {"load": "docs/load-workloads.md", "slo": "docs/load-workloads.md",
                  "trace": "docs/traffic.md#trace-replay",
                  "sessions": "docs/traffic.md#multi-turn-sessions",
                  "capacity": "docs/serving.md#capacity-under-an-sla"}


def doc_of(loc: tuple[Any, ...]) -> str:
    """The document (and section) that describes the field at ``loc``, a path of keys
    and list indexes such as ``("workloads", 0, "load", "concurrency")``: error hints
    point there."""
    if len(loc) > 2 and loc[0] == "workloads" and loc[2] in _WORKLOAD_DOCS:
        return _WORKLOAD_DOCS[loc[2]]
    if loc and loc[0] in ("arms", "defaults") and "git" in loc:
        return "docs/git-arms.md"
    if "preset_fields" in loc:
        return "docs/collectors-and-presets.md#presets-what-abbench-relies-on-per-server"
    return _DOCS.get(loc[0], README_ARMS) if loc else README_ARMS


def see(*loc: Any) -> str:
    """`` (see docs/quality.md)``: the end of a hint about the field at ``loc``."""
    return f" (see {doc_of(loc)})"

#: words people write for a field, and the field abbench calls it
SYNONYMS = {"command": "start", "cmd": "start", "args": "start", "argv": "start",
            "exec": "start", "environment": "env", "context": "contexts",
            "ctx": "contexts", "workload": "workloads", "arm": "arms", "default": "defaults",
            "repeats": "reps", "repetitions": "reps", "iterations": "rounds",
            "runs": "rounds", "working_dir": "cwd", "workdir": "cwd"}

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _words(start: list[str] | str | None, vars_: Mapping[str, str]) -> list[str]:
    """The start command's words with ``{var}`` placeholders filled from ``vars:``
    (others left as they are)."""
    if start is None:
        return []
    if isinstance(start, str):
        try:
            items = shlex.split(start)
        except ValueError:
            items = start.split()
    else:
        items = [str(s) for s in start]
    return [_PLACEHOLDER.sub(lambda m: vars_.get(m.group(1), m.group(0)), w) for w in items]


def server_word(words: list[str]) -> tuple[int, str] | None:
    """Where the start command names a known server, and which preset it is:
    ``llama-server`` -> llama.cpp, ``vllm serve`` or ``vllm.entrypoints...`` -> vllm,
    ``sglang.launch_server`` or ``sglang serve`` -> sglang. A wrapper before it
    (``taskset -c 0-7``, ``numactl``, ``python -m``) is passed over."""
    names = [PurePath(w).name for w in words]
    for i, (w, name) in enumerate(zip(words, names, strict=True)):
        nxt = names[i + 1] if i + 1 < len(names) else ""
        if name.startswith("llama-server"):
            return i, "llama.cpp"
        if w.startswith("vllm.entrypoints") or (name == "vllm" and nxt == "serve"):
            return i, "vllm"
        if w.startswith("sglang.launch_server") or (name == "sglang" and nxt == "serve"):
            return i, "sglang"
    return None


def infer_preset(start: list[str] | str | None, vars_: Mapping[str, str]) -> str | None:
    """The preset the start command names (:func:`server_word`); None when it names
    none of them (a wrapper script, another server)."""
    found = server_word(_words(start, vars_))
    return found[1] if found else None


def flag_value(words: list[str], *flags: str) -> str | None:
    """The value of the last of ``flags`` in ``words`` (``-c 4096`` or ``--ctx-size=4096``)."""
    found = None
    for i, w in enumerate(words):
        for f in flags:
            if w == f and i + 1 < len(words):
                found = words[i + 1]
            elif f.startswith("--") and w.startswith(f + "="):
                found = w[len(f) + 1:]
    return found


def did_you_mean(key: object, fields: Iterable[str]) -> str | None:
    """The field a misspelt ``key`` most likely meant, or None."""
    if not isinstance(key, str):
        return None
    known = list(fields)
    low = key.lower()
    if SYNONYMS.get(low) in known:
        return SYNONYMS[low]
    close = difflib.get_close_matches(low, known, n=1, cutoff=0.6)
    return close[0] if close else None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``list[M] | M | None`` and the like."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def fields_at(root: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model that holds the key at ``loc`` (its last part)."""
    model: type[BaseModel] | None = root
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        info = model.model_fields.get(str(part))
        model = _model_in(info.annotation) if info is not None else None
    if model is None:
        return []
    return [name for name, f in model.model_fields.items() if not f.exclude]
