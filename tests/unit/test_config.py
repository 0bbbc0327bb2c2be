from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from abbench.config.schema import (
    config_for_storage,
    expand_env,
    format_context,
    load_config,
    parse_context,
    placeholder_values,
    substitute,
)
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
    base, cand = cfg.resolved_arms()
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
    base = cfg.resolved_arms()[0]
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
