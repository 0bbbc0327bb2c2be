"""Secrets are never stored or printed, whatever their name or length: a literal
``--api-key`` value in ``start:``, a password inside a URL argument,
``DATABASE_URL``/``MYSQL_PWD``-style variables, secrets in ``request_extra``, a
5-character secret, and a known secret the server itself prints into its log. The
server gets every one of them; nothing abbench writes or prints holds one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from abbench.config import secrets
from tests.faultkit import cli, only_run, own_refserver, ref_arms, wait_gone

#: name -> value; each must reach the server and nothing abbench writes
SECRETS = {
    "flag": "sk-lit3ralFlagValue",          # --api-key VALUE, literal in start:
    "flag_eq": "tok-Eq5ignValue",           # --hf-token=VALUE
    "url_arg": "Pg5ecretInUrl",             # --db postgres://user:VALUE@host/db
    "database_url": "MyDbPw9xx",            # DATABASE_URL=mysql://root:VALUE@h/db
    "mysql_pwd": "s3cr3",                   # MYSQL_PWD (5 characters)
    "request_extra": "rx-S3cretValue42",    # request_extra: {api_key: VALUE}
    "env_short_key": "k9z2q",               # ABBENCH_TEST_KEY (5 characters), env of abbench
}


def _arms(tmp_path: Path, ref: Path) -> Path:
    wrapper = tmp_path / "wrapper.py"
    seen = tmp_path / "seen-by-server.json"
    # the server prints what it got (as servers echo their arguments), then serves
    wrapper.write_text(
        "import json, os, sys\n"
        "i = sys.argv.index('--')\n"
        "got = {'argv': sys.argv[1:i], 'env': {k: os.environ.get(k) for k in "
        "('DATABASE_URL', 'MYSQL_PWD', 'ABBENCH_TEST_KEY')}}\n"
        f"json.dump(got, open({str(seen)!r}, 'w'))\n"
        "print('server: args', ' '.join(sys.argv[1:i]), 'pwd', os.environ['MYSQL_PWD'],"
        " 'url', os.environ['DATABASE_URL'], 'key', os.environ['ABBENCH_TEST_KEY'],"
        " flush=True)\n"
        "os.execv(sys.executable, [sys.executable, *sys.argv[i + 1:]])\n")
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": [], "b": []}, rounds=1)
    doc = yaml.safe_load(arms.read_text())
    doc["arms"][0]["start"] = [
        sys.executable, str(wrapper), "--api-key", SECRETS["flag"],
        f"--hf-token={SECRETS['flag_eq']}",
        "--db", f"postgres://bench:{SECRETS['url_arg']}@localhost/db", "--",
        str(ref), "--port", "{port}"]
    doc["arms"][0]["env"] = {
        "DATABASE_URL": f"mysql://root:{SECRETS['database_url']}@db.local/bench",
        "MYSQL_PWD": SECRETS["mysql_pwd"]}
    doc["arms"][0]["request_extra"] = {"api_key": SECRETS["request_extra"]}
    arms.write_text(yaml.safe_dump(doc, sort_keys=False))
    return arms


def test_no_secret_of_any_shape_is_written_or_printed(tmp_path: Path, results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = _arms(tmp_path, ref)
    env = {"ABBENCH_TEST_KEY": SECRETS["env_short_key"]}
    p = cli("run", arms, "--results", results, "--plain", env=env)
    assert p.returncode == 0, p.stderr
    v = cli("validate", arms, env=env)
    assert v.returncode == 0, v.stderr
    got = json.loads((tmp_path / "seen-by-server.json").read_text())
    assert SECRETS["flag"] in got["argv"] and got["env"]["MYSQL_PWD"] == SECRETS["mysql_pwd"]
    assert got["env"]["ABBENCH_TEST_KEY"] == SECRETS["env_short_key"]
    run = only_run(results)
    written = {str(f.relative_to(run)): f.read_text(errors="replace")
               for f in run.rglob("*") if f.is_file()}
    assert {"config.yaml", "run.json", "samples.jsonl", "report.md", "logs/a-r0.log"} <= \
        set(written)
    assert "server: args" in written["logs/a-r0.log"]  # the server's own line is there
    written["stdout+stderr"] = p.stdout + p.stderr + v.stdout + v.stderr
    for name, text in written.items():
        for what, secret in SECRETS.items():
            assert secret not in text, f"{what} secret in {name}"
    assert "postgres://bench:***@localhost/db" in written["config.yaml"]
    wait_gone()


@pytest.mark.parametrize(("text", "want"), [
    ("--api-key sk-abcdef", "--api-key ***"),
    ("--api-key=sk-abcdef", "--api-key=***"),
    ("--password hunter22", "--password ***"),
    ("postgres://u:pw55x@h/d", "postgres://u:***@h/d"),
    ("--max-tokens 16 --tokenizer /m", "--max-tokens 16 --tokenizer /m"),  # not secrets
    ("https://example.com:8080/x", "https://example.com:8080/x"),
])
def test_flags_and_url_passwords_are_redacted_in_any_text(text: str, want: str) -> None:
    assert secrets.redact(text) == want


def test_short_secrets_are_redacted_as_whole_words_only() -> None:
    try:
        secrets.remember(["s3cr3", "a-very-long-secret-value"])
        assert secrets.redact("pwd=s3cr3 ok") == "pwd=*** ok"
        assert secrets.redact("xs3cr3y") == "xs3cr3y"  # inside a word: ordinary text
        assert secrets.redact("k=a-very-long-secret-value!") == "k=***!"
        assert secrets.secret_values({"TOKENIZERS_PARALLELISM": "false", "HOME_PATH": "/x",
                                      "GIT_AUTHOR_NAME": "Ann Lee", "N_KEY": "1"}) == []
    finally:
        secrets.forget_all()
