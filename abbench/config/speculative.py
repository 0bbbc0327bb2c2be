"""``speculative:`` in arms.yaml: acceptance of speculative decoding per prompt set."""

from __future__ import annotations

from pydantic import Field

from abbench.config.quality import FingerprintConfig


class SpeculativeConfig(FingerprintConfig):
    """Each prompt set decoded greedily and streamed in every server life: decode tok/s
    and the server's own acceptance figures (drafted, accepted, verification steps),
    one row each per set. Sets as under ``fingerprints:`` (``code``, ``ctx``, ``think``,
    a ``{name, nonce: {...}}`` set); acceptance differs by kind of prompt."""

    max_tokens: int | None = Field(None, ge=2, description="decode length of every prompt "
                                   "(greedy, stops at EOS); default: the set file's, else 32")
    prompts: int | None = Field(None, ge=1, description="the first N prompts of each set "
                                "(default: all)")
