"""Greedy, non-forced generations for quality checks and fingerprints.

One request per prompt, not streamed (timing does not matter here): a text prompt
goes to the arm's ``/v1/completions``, a list of chat messages to
``/v1/chat/completions``. Both at temperature 0, with the arm's request fields,
and with ``logprobs`` asked for so that the generated tokens come back and two
outputs can be compared token by token (llama.cpp gives ids, vLLM and SGLang
token strings; a server that gives neither leaves ``tokens`` empty).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from abbench.errors import RequestError
from abbench.server.http import Reply
from abbench.workload import wire
from abbench.workload.decode import Client

Message = dict[str, str]


@dataclass(frozen=True)
class Generation:
    """What one greedy request returned."""

    text: str
    tokens: list[int | str] = field(default_factory=list)
    completion_tokens: int | None = None
    finish_reason: str | None = None


def generate(client: Client, *, prompt: str | None = None, messages: list[Message] | None = None,
             max_tokens: int, chat_path: str = "/v1/chat/completions",
             timeout: float | None = None) -> Generation:
    """A greedy decode of ``prompt`` (completions) or ``messages`` (chat), up to ``max_tokens``."""
    if (prompt is None) == (messages is None):
        raise ValueError("give exactly one of prompt and messages")
    body = client.request_body(prompt if prompt is not None else "", max_tokens, exact=False)
    body["stream"] = False
    body.pop("stream_options", None)
    if messages is not None:
        body.pop("prompt")
        body["messages"] = messages
        body["logprobs"] = True
        body["top_logprobs"] = 1
        path = chat_path
    else:
        body["logprobs"] = 1
        path = client.arm.completions_path
    r = _post(client, path, body, timeout or client.arm.request_timeout)
    if r.status != 200:
        hint = ("the server has no chat endpoint: give the item a prompt: instead of "
                "messages:, or set quality.chat_path" if messages is not None and
                r.status == 404 else None)
        raise RequestError(f"HTTP {r.status}: {r.excerpt()}", where=path, hint=hint)
    try:
        answer = wire.parse(wire.Completion, r.body, "the answer")
    except RequestError as e:
        raise RequestError(e.message, where=path) from None
    choice = answer.choices[0]
    if messages is not None:
        text = (choice.message.content if choice.message is not None else None) or ""
    else:
        text = choice.text or ""
    ct = answer.usage.completion_tokens if answer.usage is not None else None
    return Generation(text=text, tokens=_tokens(choice.logprobs), completion_tokens=ct,
                      finish_reason=choice.finish_reason)


def _post(client: Client, path: str, body: dict[str, Any], timeout: float) -> Reply:
    """One POST through the client's transport."""
    try:
        return client.call("POST", path, body, timeout=timeout)
    except RequestError as e:
        raise RequestError(e.message, where=path) from None


def _tokens(logprobs: Any) -> list[int | str]:
    """Token ids (llama.cpp) or token strings (OpenAI legacy/chat format) from logprobs."""
    if not isinstance(logprobs, dict):
        return []
    content = logprobs.get("content")
    if isinstance(content, list):
        out: list[int | str] = []
        for t in content:
            if not isinstance(t, dict):
                return []
            out.append(int(t["id"]) if isinstance(t.get("id"), int) else str(t.get("token")))
        return out
    tokens = logprobs.get("tokens")
    if isinstance(tokens, list):
        return [str(t) for t in tokens]
    return []
