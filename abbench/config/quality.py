"""The ``quality:``, ``fingerprints:`` and ``speculative:`` sections of arms.yaml, and the
files they name."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, Field, field_validator, model_validator

from abbench.config.frozen import Frozen, endpoint_path


class _Frozen(Frozen):
    pass


class QualityConfig(_Frozen):
    """Quality checks run against every arm's live server, after its workloads."""

    suite: str | None = Field(
        "default", description="built-in suite: 'default' (abbench/data/quality-default.yaml), "
        "a YAML/JSONL path relative to the arms file, or null for none")
    command: str | None = Field(
        None, description="external check, e.g. 'python quality.py --base-url {base_url}'; "
        "prints P/T or JSON {passed, total}; placeholders {base_url} {host} {port} {arm} "
        "{round} and vars:")
    timeout: float = Field(600.0, gt=0, description="seconds the command may take")
    every: int = Field(1, ge=1, description="check in every k-th round (rounds 0, k, 2k, ...)")
    chat_path: Annotated[str, AfterValidator(endpoint_path)] = Field(
        "/v1/chat/completions", description="endpoint for chat items")

    @model_validator(mode="after")
    def _something(self) -> QualityConfig:
        if self.suite is None and self.command is None:
            raise ValueError("quality: needs a suite, a command, or both")
        return self


class NonceSet(_Frozen):
    """N generated prompts, each opening with a random nonce (seeded, recorded)."""

    count: int = Field(8, ge=1, le=10000)
    seed: int | None = Field(None, ge=0, description="default: the run's seed")
    words: int = Field(24, ge=1, le=4096, description="filler words after the nonce")


class PromptSetRef(_Frozen):
    """A prompt set: a file (by path, or by name from the arms file's prompts/ folder),
    or generated nonce prompts."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
    path: str | None = None
    nonce: NonceSet | None = None

    @model_validator(mode="after")
    def _one_source(self) -> PromptSetRef:
        if self.nonce is not None and not self.name:
            raise ValueError("a nonce prompt set needs a name")
        if self.path is not None and self.nonce is not None:
            raise ValueError("a prompt set is a path or nonce:, not both")
        if self.path is None and not self.name:
            raise ValueError("a prompt set is a name (prompts/NAME.yaml), a path, or "
                             "{name, nonce: {...}}")
        return self


class FingerprintConfig(_Frozen):
    """Greedy-output fingerprints of named prompt sets, per arm and round."""

    sets: list[PromptSetRef] = Field(min_length=1, description="prompt sets: a name "
                                     "(prompts/NAME.yaml beside the arms file), a path, or "
                                     "{name, nonce: {count, seed, words}}")
    max_tokens: int | None = Field(None, ge=1, description="decode length of every prompt "
                                   "(greedy); default: the set file's max_tokens, else 32")
    warm: bool = Field(False, description="also a warm pass after the workloads")
    chat_path: Annotated[str, AfterValidator(endpoint_path)] = "/v1/chat/completions"

    @field_validator("sets", mode="before")
    @classmethod
    def _strings_to_refs(cls, v: Any) -> Any:
        if not isinstance(v, list):
            return v
        return [({"path": s} if s.endswith((".yaml", ".yml", ".jsonl")) else {"name": s})
                if isinstance(s, str) else s for s in v]


# ------------------------------------------------------------ suite/set files


class Check(_Frozen):
    """How an output passes: exactly one of exact, contains, regex, number."""

    exact: str | None = None
    contains: str | list[str] | None = Field(None, description="every string must appear")
    regex: str | None = Field(None, description="re.search, DOTALL")
    number: float | None = Field(None, description="a number in the output within tolerance")
    tolerance: float = Field(0.0, ge=0)
    pick: Literal["first", "last", "any"] = Field("first", description="which number counts")
    ignore_case: bool = True

    @model_validator(mode="after")
    def _exactly_one(self) -> Check:
        given = [k for k in ("exact", "contains", "regex", "number")
                 if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a check is exactly one of exact, contains, regex, number; "
                             f"got {', '.join(given) or 'none'}")
        return self


#: where a prompt with ``filler_words`` wants its filler text
FILLER = "{filler}"
_P = TypeVar("_P", bound="PromptItem")


class ChatMessage(_Frozen):
    role: Literal["system", "user", "assistant"]
    content: str


class PromptItem(_Frozen):
    """One prompt: a text prompt (completions) or chat messages."""

    id: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    max_tokens: int | None = Field(None, ge=1)
    filler_words: int | None = Field(
        None, ge=1, le=250000, description="words of filler text made at load time "
        "(seeded by the set's name and the item's id: the same for every arm and round), "
        "put where the prompt says {filler}, else before it; for long-context prompts "
        "(about 1.08 tokens a word with SmolLM2's tokenizer)")

    @model_validator(mode="after")
    def _one_prompt(self) -> PromptItem:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt: and messages:")
        return self

    def with_filler(self: _P, filler: str) -> _P:
        """A copy with ``filler`` put into the prompt (or the last user message):
        where it says ``{filler}``, else before it and a blank line."""
        def put(text: str) -> str:
            return text.replace(FILLER, filler) if FILLER in text else f"{filler}\n\n{text}"

        if self.prompt is not None:
            return self.model_copy(update={"prompt": put(self.prompt)})
        msgs = list(self.messages or [])
        last = max((i for i, m in enumerate(msgs) if m.role == "user"), default=len(msgs) - 1)
        msgs[last] = msgs[last].model_copy(update={"content": put(msgs[last].content)})
        return self.model_copy(update={"messages": msgs})

    def chat(self) -> list[dict[str, str]] | None:
        return None if self.messages is None else [m.model_dump() for m in self.messages]


class QualityItem(PromptItem):
    check: Check


class SpeculativeConfig(FingerprintConfig):
    """Each prompt set decoded greedily and streamed in every server life: decode tok/s
    and the server's own acceptance figures (drafted, accepted, verification steps),
    one row each per set. Sets as under ``fingerprints:`` (``code``, ``ctx``, ``think``,
    a ``{name, nonce: {...}}`` set); acceptance differs by kind of prompt."""

    max_tokens: int | None = Field(None, ge=2, description="decode length of every prompt "
                                   "(greedy, stops at EOS); default: the set file's, else 32")
    prompts: int | None = Field(None, ge=1, description="the first N prompts of each set "
                                "(default: all)")
