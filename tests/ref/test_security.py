"""Security: no shell unless asked, secrets never written, 127.0.0.1 by default,
markdown escaped, atomic reports, samples appended and flushed one by one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import yaml

from abbench.config.arms import placeholder_values, resolve_arms
from abbench.config.loader import load_config
from abbench.server.process import start_server
from tests.faultkit import cli, only_run, own_refserver, ref_arms, wait_gone

# ----------------------------------------------------------------- no shell


def test_shell_true_runs_a_shell_with_the_port_in_the_environment(tmp_path: Path,
                                                                   results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1)
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][1] = {"name": "b", "shell": True,
                      "start": f"exec '{sys.executable}' '{ref}' --port \"$ABBENCH_PORT\""}
    arms.write_text(yaml.safe_dump(doc))
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    assert "| decode 64 (tok/s) |" in p.stdout
    wait_gone()


# ----------------------------------------------------------------- secrets

SECRETS = {"HF_TOKEN": "hf_s3cr3tV4lu3Token", "OPENAI_API_KEY": "sk-Ap1K3yV4lu3xyz",
           "DB_PASSWORD": "pa55w0rdV4lu3!", "ABF_CLIENT_SECRET": "cl13ntS3cr3tV4lu3"}


def test_secrets_never_reach_stored_files_logs_reports_or_output(tmp_path: Path,
                                                                 results: Path) -> None:
    ref = own_refserver(tmp_path)
    seen = tmp_path / "seen-by-server.json"
    wrapper = tmp_path / "wrapper.py"
    # the server sees its environment and its argv; abbench must not write them down
    wrapper.write_text(
        "import json, os, sys\n"
        "json.dump({'env': {k: os.environ.get(k) for k in ('HF_TOKEN', 'OPENAI_API_KEY',"
        " 'DB_PASSWORD')}, 'argv': sys.argv[2]}, open(sys.argv[1], 'w'))\n"
        "os.execv(sys.executable, [sys.executable, *sys.argv[3:]])\n")
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1,
                    vars={"token": SECRETS["HF_TOKEN"]},
                    defaults={"env": {"OPENAI_API_KEY": SECRETS["OPENAI_API_KEY"]}})
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][0]["env"] = {"HF_TOKEN": "{token}", "DB_PASSWORD": SECRETS["DB_PASSWORD"]}
    doc["arms"][0]["env"]["HF_TOKEN"] = SECRETS["HF_TOKEN"]
    doc["arms"][0]["start"] = [sys.executable, str(wrapper), str(seen),
                               "--api-key=${ABF_CLIENT_SECRET}", str(ref), "--port", "{port}"]
    doc["arms"][0]["label"] = "with secrets"
    arms.write_text(yaml.safe_dump(doc))
    env = {"ABF_CLIENT_SECRET": SECRETS["ABF_CLIENT_SECRET"]}
    p = cli("run", arms, "--results", results, "--plain", env=env)
    assert p.returncode == 0, p.stderr
    v = cli("validate", arms, env=env)
    assert v.returncode == 0, v.stderr
    # the server got them ...
    got = json.loads(seen.read_text())
    assert got["env"] == {k: SECRETS[k] for k in ("HF_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD")}
    assert got["argv"] == f"--api-key={SECRETS['ABF_CLIENT_SECRET']}"
    # ... and nothing abbench wrote or printed has them
    run = only_run(results)
    written = {str(f.relative_to(run)): f.read_text(errors="replace")
               for f in run.rglob("*") if f.is_file()}
    assert {"config.yaml", "run.json", "samples.jsonl", "report.md", "report.json",
            "logs/a-r0.log"} <= set(written)
    written["stdout+stderr"] = p.stdout + p.stderr + v.stdout + v.stderr
    for name, text in written.items():
        for secret in SECRETS.values():
            assert secret not in text, f"{secret} in {name}"
    cfg = yaml.safe_load(written["config.yaml"])
    assert cfg["arms"][0]["env"] == {"HF_TOKEN": "***", "DB_PASSWORD": "***"}
    assert cfg["defaults"]["env"] == {"OPENAI_API_KEY": "***"}
    assert "--api-key=***" in cfg["arms"][0]["start"]
    assert "--api-key=***" in written["logs/a-r0.log"]
    wait_gone()


# ----------------------------------------------------------------- 127.0.0.1


def test_servers_bind_127_0_0_1_by_default(tmp_path: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = tmp_path / "arms.yaml"
    arms.write_text(yaml.safe_dump({
        "defaults": {"preset": "llama.cpp"},
        "arms": [{"name": n, "start": [sys.executable, str(ref), "--host", "{host}",
                                       "--port", "{port}"]} for n in ("a", "b")],
        "workloads": [{"contexts": [64]}]}))
    cfg = load_config(arms)
    arm = resolve_arms(cfg)[0]
    assert arm.host == "127.0.0.1"
    server = start_server(arm, round_=0, log_path=tmp_path / "log",
                          argv_for_port=lambda port: arm.command(
                              placeholder_values(cfg, arm, port=port, round_=0)))
    try:
        server.wait_ready()
        listening = [c.laddr for c in psutil.Process(server.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN]
        assert [a.ip for a in listening] == ["127.0.0.1"]
        assert server.base_url == f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()
    wait_gone()


# ----------------------------------------------------------------- markdown


def test_labels_and_reasons_are_escaped_in_the_report(tmp_path: Path, results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1)
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][1]["label"] = "evil | <img src=x onerror=alert(1)>\nsecond line"
    arms.write_text(yaml.safe_dump(doc))
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    report = (only_run(results) / "report.md").read_text()
    head = next(line for line in report.splitlines() if line.startswith("| |"))
    assert head == "| | a | evil \\| &lt;img src=x onerror=alert(1)&gt; second line |"
    assert "<img" not in report
    wait_gone()


# ----------------------------------------------------------------- atomic writes


# ----------------------------------------------------------------- samples


