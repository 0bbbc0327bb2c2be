"""The shipped prompt sets ``code``, ``ctx`` and ``think`` (abbench/data/prompts/, named
by path here), and ``filler_words``: long-context prompts made at load time."""

from __future__ import annotations

from pathlib import Path

import pytest

from abbench.config.loader import config_from_data
from abbench.config.quality import PromptItem, QualityItem
from abbench.errors import ConfigError
from abbench.quality.checks import filler_seed, load_item_file
from abbench.quality.fingerprints import FingerprintTask
from abbench.workload.decode import filler_text

PROMPTS = Path(__file__).resolve().parents[2] / "abbench" / "data" / "prompts"
#: tokens per filler word with SmolLM2's tokenizer (measured: 1.077 over 24,000 words;
#: tests/real/test_prompt_sets.py checks the real counts)
TOKENS_PER_WORD = 1.077
CTX_BAND = (8 * 1024, 32 * 1024)


@pytest.mark.parametrize(("name", "max_tokens"),
                         [("code", 64), ("code-edit", 64), ("ctx", 24), ("think", 128)])
def test_each_set_loads(name: str, max_tokens: int) -> None:
    f = load_item_file(PROMPTS / f"{name}.yaml", PromptItem, key="prompts")
    assert f.name == name and f.max_tokens == max_tokens
    assert 8 <= len(f.items) <= 16
    assert len({i.id for i in f.items}) == len(f.items)


def test_ctx_prompts_lie_in_the_long_context_band() -> None:
    f = load_item_file(PROMPTS / "ctx.yaml", PromptItem, key="prompts")
    lengths = []
    for item in f.items:
        assert item.prompt is not None and "{filler}" not in item.prompt
        est = len(item.prompt.split()) * TOKENS_PER_WORD
        assert CTX_BAND[0] <= est <= CTX_BAND[1] - 2 * f.max_tokens, (item.id, est)
        lengths.append(est)
    assert lengths == sorted(lengths) and lengths[-1] > 3 * lengths[0]  # 8K up to 30K
    # the same text at every load (every arm and round), another one per item
    again = load_item_file(PROMPTS / "ctx.yaml", PromptItem, key="prompts")
    assert [i.prompt for i in again.items] == [i.prompt for i in f.items]
    assert f.items[0].prompt is not None and f.items[1].prompt is not None
    assert f.items[0].prompt[200:400] != f.items[1].prompt[200:400]


def test_the_sets_as_fingerprints_of_an_arms_file(tmp_path: Path) -> None:
    cfg = config_from_data({
        "defaults": {"start": ["srv", "--port", "{port}"]},
        "arms": [{"name": "a"}, {"name": "b"}], "workloads": [{"contexts": [64]}],
        "fingerprints": {"sets": [str(PROMPTS / f"{n}.yaml") for n in ("code", "ctx", "think")]}},
        source=str(tmp_path / "arms.yaml"))
    assert cfg.fingerprints is not None
    sets = FingerprintTask(cfg, cfg.fingerprints, cold=True).sets(run_seed=1)
    assert [(s.name, s.max_tokens, len(s.items)) for s in sets] == [
        ("code", 64, 12), ("ctx", 24, 12), ("think", 128, 12)]
    ctx = sets[1].items[0]
    assert ctx.prompt is not None and ctx.prompt.startswith("The access code is 4719.\n\n")
    assert ctx.prompt.endswith("Answer: the access code is")


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "set.yaml"
    p.write_text(body)
    return p


def test_filler_goes_where_the_prompt_says_else_before_it(tmp_path: Path) -> None:
    f = load_item_file(_write(tmp_path, """
name: mine
prompts:
  - {id: a, filler_words: 30, prompt: "Fact.\\n\\n{filler}\\n\\nQ?"}
  - {id: b, filler_words: 30, prompt: "Q?"}
  - id: c
    filler_words: 30
    messages: [{role: system, content: "Be brief."}, {role: user, content: "Q?"}]
  - {id: d, prompt: "Keeps {filler} as it is"}
"""), PromptItem, key="prompts")
    a, b, c, d = f.items
    fill_a = filler_text(30, seed=filler_seed("mine", "a"))
    assert a.prompt == f"Fact.\n\n{fill_a}\n\nQ?"
    assert b.prompt == filler_text(30, seed=filler_seed("mine", "b")) + "\n\nQ?"
    assert c.messages[0].content == "Be brief."
    assert c.messages[1].content == filler_text(30, seed=filler_seed("mine", "c")) + "\n\nQ?"
    assert d.prompt == "Keeps {filler} as it is"  # no filler_words: left alone
    assert len(fill_a.split()) == 30


def test_quality_items_take_filler_too(tmp_path: Path) -> None:
    f = load_item_file(_write(tmp_path, """
name: long
items:
  - {id: x, filler_words: 50, prompt: "Code 7.\\n{filler}\\nThe code is", check: {number: 7}}
"""), QualityItem, key="items")
    (x,) = f.items
    assert x.prompt is not None and len(x.prompt.split()) == 50 + 5


@pytest.mark.parametrize("bad", ["0", "-3", "lots", "300000"])
def test_bad_filler_words(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match="filler_words"):
        load_item_file(_write(tmp_path, f"prompts: [{{prompt: q, filler_words: {bad}}}]\n"),
                       PromptItem, key="prompts")
