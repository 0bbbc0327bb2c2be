"""Quality checks in the same rounds as the speed measurements.

Two ways, both against the arm's live server after its workloads (every k-th round):

- a built-in suite (YAML or JSONL items with a check), decoded greedily; each item's
  output and verdict is stored as a ``quality_item`` record and the score as the
  metric ``quality`` (passed) out of ``quality_total``;
- an external command printing ``P/T`` or JSON ``{"passed": P, "total": T}``; its
  stdout/stderr are kept in ``quality/`` in the run folder; the score is the metric
  ``quality_command`` out of ``quality_command_total``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from abbench.config.arms import placeholder_values, resolve_arms, substitute
from abbench.config.files import ITEM_FILE_MAX, load_yaml, read_text
from abbench.config.infer import see
from abbench.config.quality import Check, PromptItem, QualityConfig, QualityItem
from abbench.config.schema import Config
from abbench.errors import ConfigError, Interrupted, RequestError, clip, clip_repr
from abbench.model.records import At, QualityCommand, QualityItemRecord, QualitySample, at
from abbench.slot import SlotContext, SlotTask
from abbench.workload.decode import filler_text
from abbench.workload.greedy import generate

DEFAULT_SUITE = Path(__file__).parent.parent / "data" / "quality-default.yaml"


M = TypeVar("M", bound=BaseModel)


# ------------------------------------------------------------------ item files


@dataclass(frozen=True)
class ItemFile:
    """A suite or prompt-set file: its name, default max_tokens and items (ids filled in)."""

    name: str
    path: Path
    max_tokens: int | None
    items: list[Any]


def load_item_file(path: Path, model: type[M], *, key: str, where: str | None = None,
                   label: str | None = None) -> ItemFile:
    """Read a YAML file (a list, or a mapping with ``name``, ``max_tokens`` and ``key``)
    or a JSONL file (one item per line) into validated ``model`` items.

    Read like every input file (:mod:`abbench.config.files`: a regular file of at most
    1 MiB of UTF-8, YAML within its caps). Errors are at ``where`` (the arms file's
    field that names this file) and name the file as ``label``; without ``where``,
    at the file itself."""
    label = label or f"the file {clip_repr(str(path))}"

    def refuse(msg: str, hint: str | None = None) -> ConfigError:
        if where is None:
            return ConfigError(msg, where=str(path), hint=hint)
        return ConfigError(f"{label}: {msg}", where=where, hint=hint)

    text = read_text(path, limit=ITEM_FILE_MAX, where=where or str(path),
                     label=label if where else "the file",
                     hint="fix the path (relative paths start at the arms file)",
                     kind="a prompt-set or suite file")
    header: dict[str, Any] = {}
    if path.suffix == ".jsonl":
        raw: list[tuple[str, Any]] = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    raw.append((f"line {lineno}", json.loads(line)))
                except (ValueError, RecursionError) as e:
                    raise refuse(f"line {lineno}: not JSON: {clip(e)}",
                                 "one JSON object per line") from None
    else:
        try:
            data, _root = load_yaml(text, where=str(path))
        except ConfigError as e:
            raise refuse(e.message, e.hint) from None
        if isinstance(data, dict):
            header = {k: v for k, v in data.items() if k != key}
            data = data.get(key)
        if not isinstance(data, list) or not data:
            raise refuse(f"no items: expected a list, or a mapping with {key}: [...]",
                         "see abbench/data/quality-default.yaml")
        raw = [(f"{key}[{i}]", item) for i, item in enumerate(data)]
    unknown = {clip(k, 40) for k in header} - {"name", "max_tokens", "description"}
    if unknown:
        raise refuse(f"unknown key(s) {', '.join(sorted(unknown))}",
                     f"a file has name:, max_tokens:, description: and {key}:")
    name = str(header.get("name") or path.stem)
    items: list[Any] = []
    for i, (loc, obj) in enumerate(raw):
        try:
            item = model.model_validate(obj)
        except ValidationError as e:
            msgs = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(item)'}: "
                             f"{err['msg'].removeprefix('Value error, ')}"
                             for err in e.errors()[:3])
            raise refuse(f"{loc}: {clip(msgs, 400)}", "fix that item") from None
        if getattr(item, "id", None) is None:
            item = item.model_copy(update={"id": f"p{i + 1}"})
        if isinstance(item, PromptItem) and item.filler_words:
            item = item.with_filler(filler_text(item.filler_words,
                                                seed=filler_seed(name, str(item.id))))
        items.append(item)
    ids = [it.id for it in items]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise refuse(f"repeated ids: {clip(', '.join(dup))}", "give every item its own id:")
    max_tokens = header.get("max_tokens")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise refuse("max_tokens must be a positive integer", "write e.g. max_tokens: 32")
    return ItemFile(name=name, path=path, max_tokens=max_tokens, items=items)


def filler_seed(set_name: str, item_id: str) -> int:
    """The seed of an item's filler text: fixed by the set's name and the item's id."""
    digest = hashlib.sha256(f"abbench-filler:{set_name}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def suite_path(cfg: Config, suite: str) -> Path:
    if suite == "default":
        return DEFAULT_SUITE
    p = Path(suite)
    return p if p.is_absolute() else cfg.base_dir / p


def load_suite(cfg: Config, suite: str) -> ItemFile:
    path = suite_path(cfg, suite)
    return load_item_file(path, QualityItem, key="items",
                          where=f"{cfg.source or 'arms file'}: quality.suite",
                          label=f"the quality suite {clip_repr(str(path))}")


# ----------------------------------------------------------------------- checks

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def numbers_in(text: str) -> list[float]:
    out = []
    for m in _NUMBER_RE.finditer(text):
        with contextlib.suppress(ValueError):
            out.append(float(m.group().replace(",", "")))
    return out


def evaluate(check: Check, output: str) -> tuple[bool, str]:
    """Whether ``output`` passes ``check``, and a verdict in words."""
    def norm(s: str) -> str:
        return s.casefold() if check.ignore_case else s

    if check.exact is not None:
        ok = norm(output.strip()) == norm(check.exact.strip())
        return ok, "pass" if ok else f"fail: expected exactly {check.exact!r}"
    if check.contains is not None:
        wanted = [check.contains] if isinstance(check.contains, str) else check.contains
        missing = [w for w in wanted if norm(w) not in norm(output)]
        return not missing, "pass" if not missing else \
            f"fail: does not contain {', '.join(repr(w) for w in missing)}"
    if check.regex is not None:
        flags = re.DOTALL | (re.IGNORECASE if check.ignore_case else 0)
        ok = re.search(check.regex, output, flags) is not None
        return ok, "pass" if ok else f"fail: no match for /{check.regex}/"
    assert check.number is not None
    nums = numbers_in(output)
    cand = {"first": nums[:1], "last": nums[-1:], "any": nums}[check.pick]
    ok = any(abs(n - check.number) <= check.tolerance for n in cand)
    tol = f" ± {check.tolerance:g}" if check.tolerance else ""
    if ok:
        return True, "pass"
    got = f"{check.pick} number {cand[0]:g}" if len(cand) == 1 else (
        "no number" if not cand else f"numbers {', '.join(f'{n:g}' for n in cand[:5])}")
    return False, f"fail: expected {check.number:g}{tol}, got {got}"


# ----------------------------------------------------------- external command


def parse_score(stdout: str) -> tuple[int, int]:
    """``P/T`` or JSON ``{"passed": P, "total": T}``: the last line that is one of them."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        m = re.fullmatch(r"(\d+)\s*/\s*(\d+)", line)
        if m:
            p, t = int(m.group(1)), int(m.group(2))
        else:
            try:
                obj = json.loads(line)
                p, t = int(obj["passed"]), int(obj["total"])
            except (ValueError, KeyError, TypeError):
                continue
        if t < 1 or not 0 <= p <= t:
            raise ValueError(f"impossible score {p}/{t}")
        return p, t
    raise ValueError("no line 'P/T' or JSON {\"passed\": P, \"total\": T} on stdout")


@dataclass(frozen=True)
class CommandResult:
    argv: list[str]
    returncode: int | None
    seconds: float
    stdout_path: Path
    stderr_path: Path
    passed: int | None
    total: int | None
    error: str | None


def run_command(template: str, values: dict[str, str], *, cwd: Path, timeout: float,
                out_dir: Path, stem: str, stop: Any = None) -> CommandResult:
    """Run the quality command (split like a shell would, placeholders substituted)."""
    argv = [substitute(a, values, where="quality.command") for a in shlex.split(template)]
    out_dir.mkdir(parents=True, exist_ok=True)
    out_p, err_p = out_dir / f"{stem}.stdout", out_dir / f"{stem}.stderr"
    t0 = time.perf_counter()
    code: int | None = None
    error: str | None = None
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            raise ConfigError(f"cannot run {clip_repr(argv[0])}: {e.strerror or e}",
                              where="quality.command",
                              hint="give a program on PATH or a path relative to the arms "
                                   "file" + see("quality")) from None
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if stop is not None and stop.is_set():
                    raise Interrupted("interrupted during the quality command")
                if time.perf_counter() - t0 > timeout:
                    error = f"timed out after {timeout:g} s (quality.timeout)"
                    break
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    seconds = time.perf_counter() - t0
    passed = total = None
    if error is None and code != 0:
        error = f"exited with code {code}"
    if error is None:
        try:
            passed, total = parse_score(out_p.read_text(encoding="utf-8", errors="replace"))
        except ValueError as e:
            error = str(e)
    return CommandResult(argv, code, seconds, out_p, err_p, passed, total, error)


# ------------------------------------------------------------------- the task


class QualityTask:
    """Runs the suite and/or the command against each live server (not cold)."""

    name = "quality"
    cold = False

    def __init__(self, cfg: Config, qc: QualityConfig):
        self.qc = qc
        self.suite = load_suite(cfg, qc.suite) if qc.suite else None

    def check(self, cfg: Config) -> list[str]:
        """The command, before any server starts: it splits, its placeholders are
        known, its program exists (one not on PATH here is a warning)."""
        if self.qc.command is None:
            return []
        where = f"{cfg.source or 'arms file'}: quality.command"
        try:
            parts = shlex.split(self.qc.command)
        except ValueError as e:
            raise ConfigError(f"{clip_repr(self.qc.command)} does not split like a shell "
                              f"command line: {e}", where=where,
                              hint="close the quote, or escape it") from None
        if not parts:
            raise ConfigError("the command is empty", where=where,
                              hint="give a command, e.g. python3 quality.py --base-url "
                                   "{base_url}, or leave command: out" + see("quality"))
        values = placeholder_values(cfg, resolve_arms(cfg)[0], port=1, round_=0)
        argv = [substitute(a, values, where=where) for a in parts]  # placeholders known?
        prog = argv[0]
        if "/" in prog:
            p = Path(prog) if Path(prog).is_absolute() else cfg.base_dir / prog
            if not (p.is_file() and os.access(p, os.X_OK)):
                what = "is not an executable file" if p.exists() else "does not exist"
                raise ConfigError(f"program {clip_repr(prog)} {what}", where=where,
                                  hint="fix the path (relative paths start at the arms "
                                       "file), or chmod +x it" + see("quality"))
        elif shutil.which(prog) is None:
            return [f"{where}: program {clip_repr(prog)} is not on PATH here (every quality "
                    "check would fail)"]
        return []

    def run(self, ctx: SlotContext) -> None:
        if ctx.slot.round % self.qc.every:
            return
        base = at(ctx.slot)
        if self.suite is not None:
            self._suite(ctx, base)
        if self.qc.command:
            self._command(ctx, base)

    def _suite(self, ctx: SlotContext, base: At) -> None:
        assert self.suite is not None
        suite = self.suite
        t0 = time.time()
        passed, errors = 0, []
        for i, item in enumerate(suite.items):
            if ctx.stop_event.is_set():
                raise Interrupted("interrupted during the quality suite")
            max_tokens = item.max_tokens or suite.max_tokens or 32
            rec: dict[str, object] = {**base, "type": "quality_item", "suite": suite.name,
                                   "id": item.id, "index": i, "max_tokens": max_tokens,
                                   "check": item.check.model_dump(exclude_defaults=True)}
            try:
                g = generate(ctx.client, prompt=item.prompt, messages=item.chat(),
                             max_tokens=max_tokens, chat_path=self.qc.chat_path)
                ok, verdict = evaluate(item.check, g.text)
                rec.update(output=g.text, passed=ok, verdict=verdict,
                           completion_tokens=g.completion_tokens, finish_reason=g.finish_reason)
                passed += ok
            except RequestError as e:
                rec.update(output=None, passed=False, verdict=f"error: {e.message}",
                           error=str(e))
                errors.append(f"{item.id}: {e.message}")
            ctx.record(QualityItemRecord.model_validate(rec))
        total = len(suite.items)
        sample: dict[str, object] = {
            **base, "type": "sample", "workload": "server", "rep": 0, "t": t0,
            "metrics": {"quality": passed, "quality_total": total},
            "quality": {"source": "suite", "suite": suite.name, "path": str(suite.path),
                        "passed": passed, "total": total}}
        if errors:
            sample.update(valid=False, status="failed",
                          reason=f"quality suite: {len(errors)} request(s) failed: "
                                 f"{errors[0]}")
        else:
            sample.update(valid=True, status="ok", reason=None)
        ctx.record(QualitySample.model_validate(sample))

    def _command(self, ctx: SlotContext, base: At) -> None:
        assert self.qc.command is not None
        values = placeholder_values(ctx.cfg, ctx.arm, port=ctx.server.port,
                                    round_=ctx.slot.round)
        values["base_url"] = ctx.server.base_url
        t0 = time.time()
        res = run_command(self.qc.command, values, cwd=ctx.cfg.base_dir, timeout=self.qc.timeout,
                          out_dir=ctx.run_dir / "quality",
                          stem=f"{ctx.arm.name}-r{ctx.slot.round}", stop=ctx.stop_event)
        rel = {k: str(p.relative_to(ctx.run_dir)) for k, p in
               (("stdout", res.stdout_path), ("stderr", res.stderr_path))}
        ctx.record(QualityCommand.model_validate({
            **base, "type": "quality_command", "argv": res.argv, "returncode": res.returncode,
            "seconds": res.seconds, **rel, "passed": res.passed, "total": res.total,
            "error": res.error}))
        sample: dict[str, object] = {**base, "type": "sample", "workload": "server", "rep": 0,
                                  "t": t0, "quality": {"source": "command", **rel}}
        if res.error is None:
            sample.update(valid=True, status="ok", reason=None,
                          metrics={"quality_command": res.passed,
                                   "quality_command_total": res.total})
        else:
            sample.update(valid=False, status="failed", metrics={},
                          reason=f"quality command {res.error} (see {rel['stderr']})")
        ctx.record(QualitySample.model_validate(sample))


def quality_tasks(cfg: Config) -> list[SlotTask]:
    """The quality task ``quality:`` asks for (abbench.tasks entry ``quality``)."""
    return [QualityTask(cfg, cfg.quality)] if cfg.quality is not None else []
