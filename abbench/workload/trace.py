"""Traces as data: what each request of a replay sends, and when.

Two file kinds are read (docs/traffic.md has both with examples):

- **mooncake** (the format Mooncake released: one JSON object a line with
  ``timestamp`` in ms since the first request, ``input_length``, ``output_length``
  and ``hash_ids``, one id per fixed-size block of prompt tokens, 512 in their
  release; equal ids are equal blocks);
- **sessions** (multi-turn chat turns: ``session``, ``turn``, ``input_tokens`` the
  turn appends, ``output_tokens``, optional ``timestamp`` (ms, the turn's earliest
  send), ``think_ms`` after the previous turn ended, ``prefix``/``prefix_tokens``
  a prefix shared by every session naming it, ``side: true`` for a side call that
  sees the conversation but does not join it).

Both become :class:`TraceRequest` lists whose prompts are sequences of
:class:`Segment` s: a segment's tokens depend only on its key and the trace seed,
so equal keys are equal tokens in every arm and round, and the designed reuse
(:func:`designed_reuse`) is read from the trace itself.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abbench.errors import ConfigError, clip_repr

#: Mooncake's released traces use 512-token blocks
MOONCAKE_BLOCK = 512
#: a trace file larger than this is refused (a replay holds every request in memory)
MAX_TRACE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class Segment:
    """``length`` tokens of the token block named ``key`` (its first ``length``)."""

    key: str
    length: int


@dataclass(frozen=True)
class TraceRequest:
    """One request of a replay."""

    index: int
    segments: tuple[Segment, ...]
    output_length: int
    #: earliest send, ms after the replay starts (before ``speed``); None: right after
    #: the session's previous turn (plus ``think_ms``)
    t_ms: float | None = None
    think_ms: float = 0.0
    #: the conversation it belongs to (mooncake: each request its own)
    session: str = ""
    turn: int = 1
    #: a side call: sent without waiting, not part of the conversation's history
    side: bool = False

    @property
    def input_length(self) -> int:
        return sum(s.length for s in self.segments)


@dataclass
class Trace:
    """A whole trace, requests in file order."""

    requests: list[TraceRequest]
    kind: str
    source: str = ""
    notes: list[str] = field(default_factory=list)

    def sessions(self) -> dict[str, list[TraceRequest]]:
        out: dict[str, list[TraceRequest]] = {}
        for r in self.requests:
            out.setdefault(r.session, []).append(r)
        return out


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    where = str(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise ConfigError("the trace is not a regular file", where=where,
                              hint="give the path of a JSONL trace file")
        if size > MAX_TRACE_BYTES:
            raise ConfigError(f"the trace is {size:,} bytes; at most {MAX_TRACE_BYTES:,}",
                              where=where, hint="cut it with first: or split the file")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("no such trace file", where=where,
                          hint="check the path (relative paths are from the arms file)") from None
    except UnicodeDecodeError:
        raise ConfigError("the trace is not UTF-8 text", where=where,
                          hint="a trace is JSON lines") from None
    except OSError as e:
        raise ConfigError(f"cannot read the trace: {e.strerror}", where=where) from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise ConfigError(f"not JSON: {e}", where=f"{where}:{n}",
                              hint="each line of a trace is one JSON object") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"a line must be a JSON object, got {clip_repr(obj, 60)}",
                              where=f"{where}:{n}")
        yield n, obj


def _int(obj: dict[str, Any], key: str, where: str, *, low: int = 0,
         default: int | None = None) -> int:
    v = obj.get(key, default)
    if v is None:
        raise ConfigError(f"{key} is missing", where=where, hint=f"give {key}: an integer")
    if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) or v < low:
        raise ConfigError(f"{key} must be an integer >= {low}, got {clip_repr(v, 40)}",
                          where=where)
    return int(v)


def _ms(obj: dict[str, Any], key: str, where: str) -> float | None:
    v = obj.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0 or v == float("inf"):
        raise ConfigError(f"{key} must be a number of ms >= 0, got {clip_repr(v, 40)}",
                          where=where)
    return float(v)


def read_mooncake(path: Path, block_tokens: int = MOONCAKE_BLOCK) -> Trace:
    """A Mooncake trace: block ``i`` of a request is ``block_tokens`` tokens of the
    block named by ``hash_ids[i]`` (the last one cut to what ``input_length`` leaves)."""
    reqs: list[TraceRequest] = []
    for n, obj in _lines(path):
        where = f"{path}:{n}"
        ilen = _int(obj, "input_length", where, low=1)
        olen = _int(obj, "output_length", where, low=1)
        t = _ms(obj, "timestamp", where)
        ids = obj.get("hash_ids", [])
        if not isinstance(ids, list) or any(isinstance(h, bool) or not isinstance(h, int)
                                            for h in ids):
            raise ConfigError("hash_ids must be a list of integers", where=where)
        if (len(ids) - 1) * block_tokens >= ilen:
            raise ConfigError(f"{len(ids)} hash_ids of {block_tokens} tokens are more than "
                              f"input_length {ilen} needs", where=where,
                              hint=f"is the block size {block_tokens}? set trace.block_tokens")
        segs: list[Segment] = []
        left = ilen
        for h in ids:
            k = min(block_tokens, left)
            segs.append(Segment(f"h{h}", k))
            left -= k
        if left > 0:  # no id for these tokens: unique to this request
            segs.append(Segment(f"r{len(reqs)}", left))
        reqs.append(TraceRequest(len(reqs), tuple(segs), olen, t_ms=0.0 if t is None else t,
                                 session=f"r{len(reqs)}"))
    if not reqs:
        raise ConfigError("the trace holds no request", where=str(path))
    return Trace(reqs, "mooncake", str(path))


def read_sessions(path: Path) -> Trace:
    """A sessions trace (chat turns): see the module's docstring for the fields."""
    rows: list[tuple[str, int, dict[str, Any], str]] = []
    for n, obj in _lines(path):
        where = f"{path}:{n}"
        sid = obj.get("session")
        if not isinstance(sid, str | int) or isinstance(sid, bool):
            raise ConfigError("session must be a string or integer id", where=where)
        rows.append((str(sid), _int(obj, "turn", where, low=1), obj, where))
    if not rows:
        raise ConfigError("the trace holds no turn", where=str(path))
    return sessions_trace(rows, str(path))


def sessions_trace(rows: Sequence[tuple[str, int, dict[str, Any], str]], source: str) -> Trace:
    """Requests from (session, turn, fields, where) rows: each turn's prompt is the
    session's prefix, every earlier turn's user and (designed) assistant tokens, then
    its own user tokens."""
    by_session: dict[str, list[tuple[int, dict[str, Any], str]]] = {}
    for sid, turn, obj, where in rows:
        by_session.setdefault(sid, []).append((turn, obj, where))
    reqs: list[TraceRequest] = []
    prefixes: dict[str, int] = {}
    for sid, turns in by_session.items():
        turns.sort(key=lambda x: (x[0], bool(x[1].get("side"))))
        history: list[Segment] = []
        seen: set[tuple[int, bool]] = set()
        for turn, obj, where in turns:
            side = obj.get("side", False)
            if not isinstance(side, bool):
                raise ConfigError("side must be true or false", where=where)
            if (turn, False) in seen and not side:
                raise ConfigError(f"session {sid!r} has turn {turn} twice", where=where)
            seen.add((turn, side))
            if not history:
                name = obj.get("prefix")
                ptoks = _int(obj, "prefix_tokens", where, default=0)
                if name is not None and ptoks:
                    if prefixes.setdefault(str(name), ptoks) != ptoks:
                        raise ConfigError(f"prefix {name!r} has {ptoks} tokens here and "
                                          f"{prefixes[str(name)]} before", where=where)
                    history.append(Segment(f"p:{name}", ptoks))
                elif ptoks:
                    history.append(Segment(f"p:{sid}", ptoks))
            user = _int(obj, "input_tokens", where, low=1)
            out = _int(obj, "output_tokens", where, low=1)
            tag = f"s:{sid}:{turn}" + (":side" if side else "")
            segs = (*history, Segment(tag + ":u", user))
            reqs.append(TraceRequest(len(reqs), segs, out, t_ms=_ms(obj, "timestamp", where),
                                     think_ms=_ms(obj, "think_ms", where) or 0.0,
                                     session=sid, turn=turn, side=side))
            if not side:  # the next turn sees this one's question and (designed) answer
                history = [*segs, Segment(tag + ":a", out)]
    return Trace(reqs, "sessions", source)


def read_trace(path: Path, kind: str, block_tokens: int = MOONCAKE_BLOCK) -> Trace:
    return read_mooncake(path, block_tokens) if kind == "mooncake" else read_sessions(path)


def window(trace: Trace, *, first_ms: float | None) -> Trace:
    """Only the sessions whose first request is sent before ``first_ms``."""
    if first_ms is None:
        return trace
    keep = {sid for sid, rs in trace.sessions().items() if (start_ms(rs) or 0.0) < first_ms}
    reqs = [r for r in trace.requests if r.session in keep]
    return Trace(reqs, trace.kind, trace.source, [*trace.notes, f"first {first_ms / 1e3:g} s"])


def start_ms(session: Sequence[TraceRequest]) -> float | None:
    return next((r.t_ms for r in session if r.t_ms is not None), None)


# ------------------------------------------------------------------- reuse


class _Node:
    __slots__ = ("kids", "length", "seen")

    def __init__(self, length: int = 0):
        self.length = length
        self.kids: dict[str, _Node] = {}
        self.seen = 0


class PrefixTree:
    """The prefixes sent so far, by segment keys: how many of a prompt's tokens an
    unbounded prefix cache would hold when it arrives."""

    def __init__(self) -> None:
        self.root = _Node()

    def reused(self, segments: Iterable[Segment]) -> int:
        node, out = self.root, 0
        for s in segments:
            kid = node.kids.get(s.key)
            if kid is None:
                break
            out += min(s.length, kid.length)
            if s.length != kid.length:
                break
            node = kid
        return out

    def add(self, segments: Iterable[Segment]) -> None:
        node = self.root
        for s in segments:
            kid = node.kids.get(s.key)
            if kid is None:
                kid = node.kids[s.key] = _Node(s.length)
            kid.length = max(kid.length, s.length)
            kid.seen += 1
            node = kid


def designed_reuse(requests: Sequence[TraceRequest],
                   warm: Sequence[Sequence[Segment]] = ()) -> list[int]:
    """Per request, in send order (``requests`` sorted by their planned send), the
    prompt tokens already sent before it as a prefix (after ``warm`` prompts)."""
    tree = PrefixTree()
    for w in warm:
        tree.add(w)
    out = []
    for r in requests:
        out.append(tree.reused(r.segments))
        tree.add(r.segments)
    return out


def shared_prefixes(requests: Sequence[TraceRequest]) -> list[tuple[Segment, ...]]:
    """The longest prefixes that two or more requests share (each once, none a prefix
    of another): what ``cache: warm`` sends first."""
    tree = PrefixTree()
    for r in requests:
        tree.add(r.segments)
    out: list[tuple[Segment, ...]] = []

    def walk(node: _Node, path: tuple[Segment, ...]) -> None:
        shared = [(k, n) for k, n in node.kids.items() if n.seen >= 2]
        if not shared and path:
            out.append(path)
        for k, n in shared:
            walk(n, (*path, Segment(k, n.length)))

    walk(tree.root, ())
    return out


# ------------------------------------------------------------------ tokens


class TokenBook:
    """Token ids of each segment key: drawn (seeded by the key) from ``pool``, the
    tokens of the workload's filler text, so equal keys are equal tokens."""

    def __init__(self, pool: Sequence[int], seed: int):
        if not pool:
            raise ValueError("empty token pool")
        self.pool = list(pool)
        self.seed = seed
        self._blocks: dict[str, list[int]] = {}

    def tokens(self, seg: Segment) -> list[int]:
        have = self._blocks.get(seg.key)
        if have is None or len(have) < seg.length:
            rng = random.Random(f"abbench-trace:{self.seed}:{seg.key}")
            pool, k = self.pool, len(self.pool)
            have = [pool[rng.randrange(k)] for _ in range(seg.length)]
            self._blocks[seg.key] = have
        return have[: seg.length]

    def prompt(self, segments: Sequence[Segment], head: Sequence[int] = ()) -> list[int]:
        """The token ids of a prompt: ``head`` (the server's BOS) then the segments,
        cut so the whole is exactly as long as the segments."""
        out = list(head)
        for s in segments:
            out.extend(self.tokens(s))
        return out[: sum(s.length for s in segments)]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(", ", ": ")) + "\n")
