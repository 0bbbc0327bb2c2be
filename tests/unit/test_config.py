from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from abbench.config.arms import placeholder_values, resolve_arms, substitute
from abbench.config.frozen import parse_context
from abbench.config.loader import expand_env, load_config
from abbench.config.storage import config_for_storage
from abbench.config.values import format_context
from abbench.errors import ConfigError
from tests.conftest import write_arms

GOOD = """
rounds: 4
reps: 2
seed: 11
vars:
  server: /bin/true
defaults:
  preset: llama.cpp
  env: {API_KEY: hunter2, OMP_NUM_THREADS: "1"}
arms:
  - name: base
    label: prod ecb52158
    start: ["{server}", --port, "{port}", --host, "{host}"]
  - name: cand
    start: "{server} --port {port} -c 4096"
    ready: {timeout: 5}
    env: {OMP_NUM_THREADS: "2"}
workloads:
  - contexts: [32K, 255K, "1000", 1024]
    decode_tokens: 64
  - contexts: [2K]
    side_calls: {count: 3, prompt_tokens: 64, max_tokens: 8}
"""


@pytest.mark.parametrize(("text", "n"), [("32K", 32768), ("255K", 261120), ("1000", 1000),
                                          (1024, 1024), ("1M", 1048576), ("0.5K", 512),
                                          ("  64k ", 65536)])
def test_parse_context(text, n):
    assert parse_context(text) == n


@pytest.mark.parametrize("bad", ["32Q", "", "K", "-5", 0, True, "1e3"])
def test_parse_context_rejects(bad):
    with pytest.raises(ValueError):
        parse_context(bad)


def test_format_context_round_trips():
    assert format_context(32768) == "32K"
    assert format_context(261120) == "255K"
    assert format_context(1000) == "1000"


def test_load_good_config(tmp_path: Path):
    cfg = load_config(write_arms(tmp_path / "a.yaml", GOOD))
    assert cfg.rounds == 4 and cfg.reps == 2 and cfg.seed == 11
    assert cfg.baseline_name == "base"
    assert cfg.workloads[0].contexts == [32768, 261120, 1000, 1024]
    assert cfg.workloads[0].row_name(32768) == "decode 32K"
    assert cfg.workloads[1].row_name(2048) == "decode 2K + side calls"
    base, cand = resolve_arms(cfg)
    assert base.label == "prod ecb52158" and cand.label == "cand"
    assert base.ready.path == "/health"  # from the preset
    assert cand.ready.timeout == 5
    assert cand.argv == ["{server}", "--port", "{port}", "-c", "4096"]  # split like a shell
    assert cand.env == {"API_KEY": "hunter2", "OMP_NUM_THREADS": "2"}  # arm overrides
    assert base.host == "127.0.0.1"
    with pytest.raises(ValidationError):  # frozen
        cfg.rounds = 3  # type: ignore[misc]


def test_placeholders_substituted_per_item(tmp_path: Path):
    cfg = load_config(write_arms(tmp_path / "a.yaml", GOOD))
    base = resolve_arms(cfg)[0]
    argv = base.command(placeholder_values(cfg, base, port=8123, round_=2))
    assert argv == ["/bin/true", "--port", "8123", "--host", "127.0.0.1"]


def test_substitute_literal_braces_and_unknown():
    assert substitute("{{x}} {port}", {"port": "1"}, where="w") == "{x} 1"
    with pytest.raises(ConfigError) as e:
        substitute("--model {modle}", {"model": "m"}, where="arm a: start")
    assert "modle" in str(e.value) and "{model}" in str(e.value)


def test_env_expansion(monkeypatch):
    env = {"A": "x"}
    assert expand_env("${A}/${B:-dflt}", where="w", environ=env) == "x/dflt"
    with pytest.raises(ConfigError) as e:
        expand_env("${NOPE}", where="f.yaml: vars.server", environ=env)
    assert "NOPE" in str(e.value) and "vars.server" in str(e.value)


def test_secrets_redacted_for_storage(tmp_path: Path):
    cfg = load_config(write_arms(tmp_path / "a.yaml", GOOD))
    stored = config_for_storage(cfg)
    assert stored["defaults"]["env"]["API_KEY"] == "***"
    assert stored["resolved_arms"][0]["env"]["API_KEY"] == "***"
    assert stored["resolved_arms"][0]["env"]["OMP_NUM_THREADS"] == "1"
    assert "hunter2" not in str(stored)


def test_a_flag_value_is_redacted_but_not_a_word_after_a_hyphenated_one() -> None:
    """'16-token blocks' (a trace workload's description) is no --token flag."""
    from abbench.config.secrets import redact

    assert redact("serve --api-key hunter2 -token=s3cret") == "serve --api-key *** -token=***"
    assert redact("16-token blocks, speed 1x") == "16-token blocks, speed 1x"


@pytest.mark.parametrize(("patch", "needle"), [
    ("rounds: 4", "rounds: 4\nroundz: 3"),
    ("rounds: 4", "rounds: many"),
    ("rounds: 4", "rounds: 0"),
])
def test_errors_name_file_line_field_and_hint(tmp_path: Path, patch, needle):
    p = write_arms(tmp_path / "bad.yaml", GOOD.replace(patch, needle))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    text = str(e.value)
    assert str(p) in text and "line " in text and "hint:" in text
    assert e.value.exit_code == 2


def test_missing_start_is_an_error(tmp_path: Path):
    p = write_arms(tmp_path / "bad.yaml", GOOD.replace(
        '    start: "{server} --port {port} -c 4096"\n', ""))
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "no start command" in str(e.value) and "arms[1]" in str(e.value)


# ------------------------------------------------ silent cases, decided (README)


def test_accepted_as_they_are_meant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A byte-order mark is dropped; env and vars numbers stay as written; ${ENV}
    values that expand to numbers are read as numbers."""
    monkeypatch.setenv("ABF_ROUNDS", "5")
    p = tmp_path / "arms.yaml"
    p.write_bytes(b"\xef\xbb\xbf" + GOOD.replace("rounds: 4", "rounds: ${ABF_ROUNDS:-3}")
                  .replace("  server: /bin/true", "  server: /bin/true\n  dev: 010\n  lr: 0.10")
                  .replace('OMP_NUM_THREADS: "2"', "OMP_NUM_THREADS: 08, CUDA: 1e3").encode())
    cfg = load_config(p)
    assert cfg.rounds == 5
    assert cfg.vars["dev"] == "010" and cfg.vars["lr"] == "0.10"  # YAML read 8 and 0.1
    assert cfg.arms[1].env == {"OMP_NUM_THREADS": "08", "CUDA": "1e3"}


def test_warned_the_same_by_validate_and_run(tmp_path: Path) -> None:
    from abbench.campaign.preflight import check_config
    from abbench.campaign.runner import Campaign, RunOptions

    p = write_arms(tmp_path / "arms.yaml", """
        order: sequential
        seed: 3
        vars: {model: $HOME/m.gguf}
        defaults: {tokenize_path: /tokenize}
        arms:
          - {name: a, label: same, start: [/bin/true, --port, "{port}", -m, "{model}"],
             env: {P: "$PATH:/opt/bin"}, request_extra: {temperature: 0.7}}
          - {name: b, label: other, start: [/bin/true, --port, "{port}"]}
        workloads: [{contexts: [64], decode_tokens: 8}]
    """)
    checked = check_config(load_config(p), strict_exec=False)
    assert checked.warnings == [
        f"{p}: vars.model: $HOME is not expanded (only ${{HOME}} is taken from the "
        "environment)",
        f"{p}: arms[0] (a).env.P: $PATH is not expanded (only ${{PATH}} is taken from the "
        "environment)",
        f"{p}: arms[0] (a).request_extra: temperature replaces abbench's greedy settings: "
        "fingerprints and quality checks are then not reproducible",
        f"{p}: seed: 3 changes nothing with order: sequential (only interleaved orders are "
        "drawn)"]
    camp = Campaign(load_config(p), RunOptions(results=tmp_path / "r"))
    assert camp.warnings == checked.warnings  # run warns of exactly the same
    assert not (tmp_path / "r").exists()


def test_prompt_sets_ship_with_abbench_and_a_prompts_folder_overrides(tmp_path: Path) -> None:
    from abbench.campaign.preflight import check_config

    body = """
        defaults: {preset: llama.cpp}
        arms:
          - {name: a, start: [/bin/true, --port, "{port}"]}
          - {name: b, start: [/bin/true, --port, "{port}"]}
        workloads: [{contexts: [64], decode_tokens: 8}]
        fingerprints: {sets: [basics, chat, mine]}
    """
    p = write_arms(tmp_path / "arms.yaml", body)
    with pytest.raises(ConfigError, match="no prompt set named 'mine'"):
        check_config(load_config(p), strict_exec=False)  # validate finds it too
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "mine.yaml").write_text("prompts: [{prompt: hello}]\n")
    (tmp_path / "prompts" / "chat.yaml").write_text("name: chat\nprompts: [{prompt: hi}]\n")
    checked = check_config(load_config(p), strict_exec=False)
    assert checked.set_sources() == [
        "basics", f"chat ({tmp_path}/prompts/chat.yaml, over the built-in one)",
        f"mine ({tmp_path}/prompts/mine.yaml)"]
    sets = {s.name: s for t in checked.tasks if getattr(t, "cold", False)
            for s in getattr(t, "sets", lambda seed: [])(1)}
    assert len(sets["basics"].items) == 8 and len(sets["chat"].items) == 1
