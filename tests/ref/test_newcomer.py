"""The first hour of a user, played: abbench installed from a checkout with
``pip install .`` into a fresh virtual environment, then README's Quick start
commands run as written against two "builds" of llama-server (reference servers
behind scripts named llama-server, one faster), and the same arms file with each
common mistake refused with one line that says where and one that says the fix.

The fresh environment gets abbench from the wheel ``pip install .`` builds; its
dependencies (pandas, scipy, ...) are those of the test's own environment, seen
through a ``.pth`` line, so that the test takes seconds, not the two minutes a cold
install of them takes on a 2-core machine. ``import abbench`` is checked to come
from the new environment, with its prompt sets and quality suite."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import REFSERVER, ROOT

README = ROOT / "README.md"


def _blocks(section: str, lang: str) -> list[str]:
    """The ``lang`` code blocks of README's ``## section``, in order."""
    text = README.read_text(encoding="utf-8")
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks: list[tuple[str, list[str]]] = []
    inside = False
    for line in body.splitlines():
        if line.startswith("```"):
            if not inside:
                blocks.append((line[3:].strip(), []))
            inside = not inside
        elif inside:
            blocks[-1][1].append(line)
    return ["\n".join(lines) + "\n" for tag, lines in blocks if tag == lang]


def _commands(section: str) -> list[str]:
    return [ln for b in _blocks(section, "bash") for ln in b.splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with abbench installed by README's Install
    commands, run in a copy of the checkout (tracked and untracked files, as git
    would clone them)."""
    top = tmp_path_factory.mktemp("newcomer")
    src = top / "abbench-src"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\n")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    env_dir = top / "venv"
    subprocess.run([sys.executable, "-m", "venv", env_dir], check=True, timeout=300)
    purelib = sysconfig.get_paths(vars={"base": str(env_dir), "platbase": str(env_dir)})
    site = Path(purelib["purelib"])
    (site / "_abbench_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {**os.environ, "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "VIRTUAL_ENV": str(env_dir)}
    for cmd in _commands("Install"):
        p = subprocess.run(cmd, shell=True, cwd=src, env=env, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0, (cmd, p.stdout[-2000:], p.stderr[-2000:])
    where = subprocess.run([env_dir / "bin" / "python", "-c", "import abbench, pathlib; "
                            "print(pathlib.Path(abbench.__file__).parent)"], cwd=top,
                           capture_output=True, text=True, check=True).stdout.strip()
    pkg = Path(where)
    assert pkg.is_relative_to(env_dir), f"abbench imported from {pkg}, not the new venv"
    assert (pkg / "data" / "quality-default.yaml").is_file()
    assert {p.name for p in (pkg / "data" / "prompts").glob("*.yaml")} >= {
        "basics.yaml", "chat.yaml", "code.yaml", "ctx.yaml", "think.yaml"}
    return env_dir


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A user's folder: two builds of llama-server (reference servers at 200 and
    260 tok/s behind scripts of that name) and a model file."""
    for build, rate in (("base", 200), ("pr", 260)):
        exe = tmp_path / build / "build" / "bin" / "llama-server"
        exe.parent.mkdir(parents=True)
        exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REFSERVER}" --rate {rate} "$@"\n')
        exe.chmod(0o755)
    (tmp_path / "model.gguf").write_bytes(b"GGUF" + bytes(4096))
    return tmp_path


def _sh(cmd: str, cwd: Path, venv: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "COLUMNS": "200"}
    return subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_quick_start_as_written(venv: Path, home: Path) -> None:
    arms, vllm, sglang = _blocks("Quick start", "yaml")
    assert len(arms.splitlines()) <= 11
    (home / "arms.yaml").write_text(arms)
    commands = _commands("Quick start")
    assert commands == ["abbench validate arms.yaml", "abbench run arms.yaml"]
    plan = _sh(commands[0], home, venv)
    assert plan.returncode == 0, plan.stderr
    assert "base (baseline): label 'base', preset llama.cpp (from the start command)" \
        in plan.stdout
    assert "-c 8192 -ngl 99" in plan.stdout  # bare numbers taken as written
    assert "run draws its own unless --seed" in plan.stdout
    assert "warning" not in plan.stdout
    run = _sh(commands[1], home, venv)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    # each server life's figures as it ends, on the progress stream
    assert re.search(r"^  pr round \d: decode 1K 2\d\d\.\d tok/s, decode 4K 2\d\d\.\d tok/s",
                     run.stderr, flags=re.M), run.stderr[-2000:]
    assert ("Setup: server llama.cpp (llama-server), model model.gguf, 4 KiB" in out
            or "Setup: server llama.cpp (llama-server), model model.gguf" in out)
    assert "- pr: `program ./pr/build/bin/llama-server (was ./base/build/bin/llama-server)`" \
        in out
    lines = out.splitlines()
    head = lines.index("| | base | pr |")
    rows = lines[head + 2:lines.index("", head)]
    decode = [ln for ln in rows if ln.startswith("| decode ")]
    assert len(decode) == 2 and all(ln.endswith("▲ |") for ln in decode), rows
    assert re.search(r"\*\*Summary\*\* \(▲ better, ▼ worse\): pr: decode \+\d", out)
    # the table and its summary line are printed last; report.md holds them, then the
    # details (legend, notes, statistics per row)
    (report,) = (home / "results").glob("*/report.md")
    assert out.startswith("abbench run `") and out.rstrip().splitlines()[-1].startswith(
        "**Summary** ")
    assert report.read_text().startswith(out + "\n") and "<details>" not in out
    assert f"Under the table, results/{report.parent.name}/report.md holds the legend" \
        in run.stderr
    # the vLLM and SGLang files pass validate where those servers are not installed
    for name, text in (("vllm", vllm), ("sglang", sglang)):
        (home / f"{name}.yaml").write_text(text)
        p = _sh(f"abbench validate {name}.yaml", home, venv)
        assert p.returncode == 0, p.stderr
        assert f"preset {name} (from the start command)" in p.stdout
        assert "does not exist here (fine if the servers run elsewhere" in p.stdout


def test_the_readme_error_example_is_what_validate_says(venv: Path, home: Path) -> None:
    arms = _blocks("Quick start", "yaml")[0]
    (home / "arms.yaml").write_text(arms.replace("contexts:", "context:"))
    (example,) = [b for b in _blocks("Quick start", "") if b.startswith("Error: ")]
    p = _sh("abbench validate arms.yaml", home, venv)
    assert p.returncode == 2
    assert p.stderr == example


MISTAKES = {
    "wrong key": (("contexts:", "context:"),
                  "Error: arms.yaml: line 9, workloads[0].context: unknown key 'context' "
                  "(did you mean 'contexts'?)",
                  "hint: rename it to contexts: (see README.md#the-arms-file)"),
    "context beyond -c": (("[1K, 4K]", "[1K, 8K]"),
                          "Error: arms.yaml: arms[0] (base).start: decode: context 8K + 64 "
                          "decode tokens = 8256 tokens, more than the 8192 a request may have "
                          "on this server (-c 8192)",
                          "hint: raise -c to at least 8256; or use shorter contexts (see "
                          "README.md#when-a-file-is-refused)"),
    "missing model": (("-m, model.gguf", "-m, modle.gguf"),
                      "Error: arms.yaml: arms[0] (base).start: model 'modle.gguf' does not "
                      "exist (relative to cwd:, by default the arms file's folder)",
                      "hint: fix the path (check vars: and the file name), or download the "
                      "model first (see README.md#when-a-file-is-refused)"),
    "tab": (("\n  - name: pr", "\n\t- name: pr"),
            "Error: arms.yaml: line 6, column 1: a tab character: YAML indents with spaces "
            "only",
            "hint: replace the tab with spaces (two per level, as in the README's examples)"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_each_mistake_gets_one_line_with_the_fix(venv: Path, home: Path, mistake: str) -> None:
    (old, new), error, hint = MISTAKES[mistake]
    arms = _blocks("Quick start", "yaml")[0]
    assert old in arms
    (home / "arms.yaml").write_text(arms.replace(old, new, 1))
    p = _sh("abbench validate arms.yaml", home, venv)
    assert p.returncode == 2, p.stdout
    assert p.stderr.splitlines() == [error, hint]
    assert not (home / "results").exists()


def test_unquoted_numbers_and_booleans_in_start_are_taken_as_written(
        venv: Path, home: Path) -> None:
    arms = _blocks("Quick start", "yaml")[0].replace("-ngl, 99", "-ngl, 99, -fa, on, -t, 010")
    (home / "arms.yaml").write_text(arms)
    p = _sh("abbench validate arms.yaml", home, venv)
    assert p.returncode == 0, p.stderr
    assert "-c 8192 -ngl 99 -fa on -t 010 --port {port}" in p.stdout
