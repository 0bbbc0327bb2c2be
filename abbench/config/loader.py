"""Reading arms.yaml: ``${ENV}`` expansion, YAML line maps, numbers as written,
pydantic errors turned into one :class:`ConfigError` naming file, line and field."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    ValidationError,
)

from abbench.config.arms import resolve_arms
from abbench.config.files import ARMS_FILE_MAX, PROMPT_TEXT_MAX, load_yaml, read_text
from abbench.config.infer import did_you_mean, doc_of, fields_at
from abbench.config.schema import Config
from abbench.config.secrets import (
    remember,
)
from abbench.config.storage import config_secret_values
from abbench.errors import ConfigError, clip, clip_repr

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(text: str, *, where: str, environ: Mapping[str, str] | None = None) -> str:
    """``${NAME}`` and ``${NAME:-default}`` from the environment."""
    environ = os.environ if environ is None else environ

    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        if name in environ and environ[name] != "":
            return environ[name]
        if default is not None:
            return os.path.expanduser(default)
        raise ConfigError(f"environment variable {name} is not set", where=where,
                          hint=f"export {name}=..., or write ${{{name}:-default}}")

    return _ENV_RE.sub(repl, text)


def _expand_tree(node: Any, path: tuple[Any, ...], src: str,
                 lines: dict[tuple[Any, ...], int] | None = None) -> Any:
    if isinstance(node, str):
        line = (lines or {}).get(path)
        at = f"line {line}, " if line else ""
        return expand_env(node, where=f"{src}: {at}{_fmt_loc(path)}")
    if isinstance(node, list):
        return [_expand_tree(v, (*path, i), src, lines) for i, v in enumerate(node)]
    if isinstance(node, dict):
        for k in node:
            if isinstance(k, str) and "${" in k:
                line = (lines or {}).get((*path, k))
                at = f"line {line}, " if line else ""
                raise ConfigError(f"{at}{_fmt_loc((*path, k))}: ${{...}} is expanded in values, "
                                  "not in keys", where=src,
                                  hint="write the key out; put the variable in its value")
        return {k: _expand_tree(v, (*path, k), src, lines) for k, v in node.items()}
    return node


def _written_numbers(root: yaml.Node | None) -> dict[tuple[Any, ...], str]:
    """Each plain number or boolean of the document as written (``010``, ``0.10``,
    ``on``), by path."""
    out: dict[tuple[Any, ...], str] = {}
    numbers = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")

    def walk(node: yaml.Node, path: tuple[Any, ...], depth: int) -> None:
        if depth > 8:  # only the top levels hold vars: and env:
            return
        if isinstance(node, yaml.ScalarNode) and node.tag in numbers:
            out[path] = node.value
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                walk(v, (*path, k.value), depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i), depth + 1)

    if root is not None:
        walk(root, (), 0)
    return out


def _text_as_written(data: dict[str, Any], root: yaml.Node | None) -> dict[str, Any]:
    """``vars:`` and ``env:`` values that YAML read as numbers, as they were written
    (``X: 010`` is "010", not "8"; ``0.10`` is "0.10", not "0.1")."""
    written = _written_numbers(root)

    def fix(mapping: Any, path: tuple[Any, ...]) -> Any:
        if not isinstance(mapping, dict):
            return mapping
        return {k: written.get((*path, k), v) if isinstance(v, (int, float))
                and not isinstance(v, bool) else v for k, v in mapping.items()}

    def fix_start(spec: Any, path: tuple[Any, ...]) -> Any:
        """``start: [-c, 8192, -fa, on]``: the items YAML read as numbers or booleans,
        as the text they stand for ("8192", "on")."""
        if not isinstance(spec, dict) or not isinstance(spec.get("start"), list):
            return spec
        items = [written.get((*path, "start", i), v) if isinstance(v, (int, float)) else v
                 for i, v in enumerate(spec["start"])]
        return {**spec, "start": items}

    data = dict(data)
    if isinstance(data.get("defaults"), dict):
        data["defaults"] = fix_start(data["defaults"], ("defaults",))
    if isinstance(data.get("arms"), list):
        data["arms"] = [fix_start(a, ("arms", i)) for i, a in enumerate(data["arms"])]
    if "vars" in data:
        data["vars"] = fix(data["vars"], ("vars",))
    if isinstance(data.get("defaults"), dict) and "env" in data["defaults"]:
        data["defaults"] = {**data["defaults"], "env": fix(data["defaults"]["env"],
                                                           ("defaults", "env"))}
    if isinstance(data.get("arms"), list):
        data["arms"] = [{**a, "env": fix(a["env"], ("arms", i, "env"))}
                        if isinstance(a, dict) and "env" in a else a
                        for i, a in enumerate(data["arms"])]
    return data


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        name = clip(part, 60)
        out += f"[{part}]" if isinstance(part, int) else (f".{name}" if out else name)
    return out or "(top level)"


def _line_map(root: yaml.Node | None) -> dict[tuple[Any, ...], int]:
    """Map each YAML path to its 1-based line, for error messages."""
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[Any, ...]) -> None:
        lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = k.value
                lines[(*path, key)] = k.start_mark.line + 1
                walk(v, (*path, key))
                lines[(*path, key)] = k.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, (*path, i))

    if root is not None:
        walk(root, ())
    return lines


def _compose(text: str) -> yaml.Node | None:
    """The node tree of ``text`` (for line numbers), or None when it does not parse."""
    try:
        return load_yaml(text, where="")[1]
    except ConfigError:
        return None


#: problems of one file listed in its message before the rest are counted
MOST_PROBLEMS = 3

_HINTS = {
    "extra_forbidden": "remove it or check its spelling",
    "missing": "add it",
    "literal_error": "use one of the values listed",
    "too_short": "give at least the number of items asked for",
    "int_parsing": "write a whole number, without quotes or units",
    "int_from_float": "write a whole number",
    "int_type": "write a whole number",
    "float_parsing": "write a number",
    "bool_parsing": "write true or false",
    "greater_than_equal": "use a larger value (the smallest allowed is named)",
    "greater_than": "use a larger value (the bound is named)",
    "less_than_equal": "use a smaller value (the largest allowed is named)",
    "string_pattern_mismatch": "names use letters, digits and _ . + - only (no spaces), "
                               "starting with a letter or digit",
    "dict_type": "write it as a mapping: one NAME: value per line",
    "list_type": "write it as a list: [a, b] or one '- item' per line",
    "string_type": "write a string (quote it if YAML reads it as something else)",
    "value_error": "fix the value as the message says",
    "baseline": "set baseline: to one of the arm names, or leave it out (the first arm)",
    "bool_type_here": "write the value itself; quote text that YAML would read as a boolean",
    "finite_number": "write a finite number (not .inf or .nan)",
    "text_value": "quote the value",
    "env_name": "environment variable names are letters, digits and _",
    "host": "write e.g. 127.0.0.1, ::1 or localhost; the port goes in port:",
    "endpoint_path": "start it with /, e.g. /health or /v1/completions",
    "owned_field": "remove it from request_extra: abbench sets it",
    "nul": "remove the NUL character (\\0)",
    "plan_size": "split the campaign over several runs",
    "too_long": "split the arms over several files",
    "start_mapping": "quote placeholders in start: lists: '{port}'",
    "git_source": "name a source of sources:, or add it there (repo, build, artifacts)",
    "variants": "name an arm that has git: {source, ref}",
}

# pydantic names the member of a union that failed ("int", "literal['auto']"):
# not a field, left out of the field path.
_UNION_TAGS = {"int", "str", "float", "bool", "list", "dict", "constrained-int"}


def config_from_data(data: Any, *, source: str, text: str = "",
                     root: yaml.Node | None = None) -> Config:
    """A :class:`Config` of YAML ``data`` (``root``, or else ``text``, gives the lines
    for messages)."""
    if not isinstance(data, dict):
        raise ConfigError("the file must be a YAML mapping (arms:, workloads:, ...)", where=source,
                          hint="see the example in README.md#quick-start")
    root = root if root is not None else _compose(text) if text else None
    lines = _line_map(root)
    data = _text_as_written(_expand_tree(data, (), source, lines), root)
    try:
        cfg = Config.model_validate({**data, "source": source})
    except ValidationError as e:
        raise _config_error(e, source, lines) from None
    return cfg


def _config_error(e: ValidationError, source: str,
                  lines: dict[tuple[Any, ...], int]) -> ConfigError:
    by_loc: dict[tuple[Any, ...], list[str]] = {}
    hint = None
    for err in e.errors():
        raw = err["loc"]
        loc = tuple(p for i, p in enumerate(raw) if not (isinstance(p, str) and (
            "[" in p or p.startswith("function") or p in _UNION_TAGS
            or (i >= 2 and raw[i - 2] == "collectors" and isinstance(raw[i - 1], int)))))
        if err["type"] == "baseline":
            loc = ("baseline",)
        if err["type"] in ("git_source", "variants"):
            loc = ("arms",) if err["type"] == "git_source" else ("variants",)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = f"unknown key {clip_repr(loc[-1], 60)}"
            near = did_you_mean(loc[-1], fields_at(Config, loc))
            if near is not None:
                msg += f" (did you mean {near!r}?)"
                hint = hint or f"rename it to {near}:"
        if msg.startswith("arm names must be unique"):
            hint = hint or "give each arm its own name"
        by_loc.setdefault(loc, []).append(msg)
        hint = hint or _HINTS.get(err["type"])
    msgs = []
    for loc, parts in by_loc.items():  # a union's members: "a valid integer, or 'auto'"
        line = None
        probe = loc
        while probe and line is None:
            line = lines.get(probe)
            probe = probe[:-1]
        at = f"line {line}, " if line else ""
        msgs.append(f"{at}{_fmt_loc(loc)}: " + ", or ".join(parts))
    if len(msgs) > MOST_PROBLEMS:  # the first ones say enough
        msgs = [*msgs[:MOST_PROBLEMS], f"and {len(msgs) - MOST_PROBLEMS} more problem(s)"]
    doc = doc_of(next(iter(by_loc), ()))  # the first field's document
    return ConfigError("; ".join(msgs), where=source,
                       hint=f"{hint or 'fix the field named'} (see {doc})")


def prompt_text(cfg: Config, index: int,
                lines: dict[tuple[Any, ...], int] | None = None) -> str | None:
    """The text of workload ``index``'s prompt file (None for filler), read with the
    caps of every input file; refused when it holds no text."""
    w = cfg.workloads[index]
    if w.prompt.source != "file" or not w.prompt.path:
        return None
    p = Path(w.prompt.path)
    p = p if p.is_absolute() else cfg.base_dir / p
    loc = ("workloads", index, "prompt", "path")
    line = (lines or {}).get(loc) or (lines or {}).get(loc[:3])
    where = f"{cfg.source or 'arms file'}: {f'line {line}, ' if line else ''}{_fmt_loc(loc)}"
    label = f"the prompt file {clip_repr(str(p))}"
    hint = "give a text file, relative to the arms file"
    if w.prompt.path.startswith("~"):
        hint += " (~ is not expanded: write ${HOME}/...)"
    text = read_text(p, limit=PROMPT_TEXT_MAX, where=where, label=label, hint=hint,
                     kind="a prompt file")
    if not text.strip():
        raise ConfigError(f"{label} holds no text", where=where, hint=hint)
    return text


def _check_files(cfg: Config, src: str, lines: dict[tuple[Any, ...], int]) -> None:
    """Files the config names that must be readable before a run (prompt texts)."""
    for i in range(len(cfg.workloads)):
        prompt_text(cfg, i, lines)


def load_config(path: str | os.PathLike[str]) -> Config:
    p = Path(path)
    src = str(p)
    text = read_text(p, limit=ARMS_FILE_MAX, where=src, kind="an arms file",
                     hint="give the path of an arms file (README.md#quick-start writes one)")
    data, root = load_yaml(text, where=src)
    if data is None:
        raise ConfigError("the file is empty", where=src,
                          hint="see the example in README.md#quick-start")
    cfg = config_from_data(data, source=src, root=root)
    resolve_arms(cfg)  # resolves presets and start commands: fail early
    _check_files(cfg, src, _line_map(root))
    remember(config_secret_values(cfg))  # hidden in everything abbench writes from now
    return cfg
