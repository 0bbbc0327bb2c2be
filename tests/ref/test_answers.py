"""No sample is measured twice or wrong: a server's answer is checked against itself
(content chunks against its usage, its timings against the stream), a stream that
arrives in one read is named as such, a failed warm-up is kept with its server life,
and every request (/tokenize too) is bounded by request_timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faultkit import cli, only_run, own_refserver, ref_arms, samples, slots

#: (refserver flags, words the reason of every sample of that arm must hold)
CONTRADICTIONS = {
    "overstream": (["--fault", "overstream"],
                   "the server streamed 24 content chunks but its usage says 16 completion "
                   "tokens"),
    "timings-long": (["--fault", "timings-long", "--rate", "100"],
                     "is longer than the whole stream took here"),
    "one-read": (["--burst"], "all 16 content chunks arrived in one read"),
}


@pytest.mark.parametrize("case", sorted(CONTRADICTIONS))
def test_an_answer_that_contradicts_itself_is_invalid_with_the_reason(
        tmp_path: Path, results: Path, case: str) -> None:
    flags, reason = CONTRADICTIONS[case]
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": flags, "b": []}, rounds=1)
    p = cli("run", arms, "--results", results, "--plain")
    assert "Traceback" not in p.stderr
    run = only_run(results)
    bad = [s for s in samples(run) if s["arm"] == "a"]
    good = [s for s in samples(run) if s["arm"] == "b"]
    assert bad and all(not s["valid"] and reason in s["reason"] for s in bad), bad
    assert "fewer than two content chunks" not in str(bad)
    assert good and all(s["valid"] for s in good)


def test_identical_servers_are_not_called_different_by_a_miscounting_one(
        tmp_path: Path, results: Path) -> None:
    """The example of the issue: usage 16 for 24 chunks read as -34..-37% before."""
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref,
                    {"a": ["--rate", "100"], "b": ["--rate", "100", "--fault", "overstream"]},
                    rounds=2)
    cli("run", arms, "--results", results, "--plain")
    md = (only_run(results) / "report.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| decode")]
    assert rows and all(line.endswith("| no data |") for line in rows), md  # no delta
    assert "Invalid samples (wrong token count or failed; left out): b: 4." in md


def test_a_failed_warmup_is_kept_with_its_server_life(tmp_path: Path, results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref,
                    {"a": ["--fault", "http500", "--fault-first", "1"], "b": []}, rounds=1)
    p = cli("run", arms, "--results", results, "--plain")
    assert p.returncode == 0, p.stderr
    assert "warm-up request 1 failed: HTTP 500" in p.stderr
    run = only_run(results)
    (a,) = [s for s in slots(run) if s["arm"] == "a"]
    assert a["warmup_failed"] and "HTTP 500" in a["warmup_failed"][0]
    assert all("warmup_failed" not in s for s in slots(run) if s["arm"] == "b")


def test_a_tokenize_that_never_answers_is_bounded_by_request_timeout(
        tmp_path: Path, results: Path) -> None:
    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "arms.yaml", ref, {"a": ["--fault", "hang-tokenize"], "b": []},
                    rounds=1, defaults={"request_timeout": 1})
    p = cli("run", arms, "--results", results, "--plain", timeout=600)
    assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr
    bad = [s for s in samples(only_run(results)) if s["arm"] == "a"]
    # each call gave up after request_timeout (1 s), not the 120 s it waited before
    assert bad and all(s["status"] == "failed" and "tokenize failed at /tokenize: timed out"
                       in s["reason"] and "sent no data for 1 s" in s["reason"]
                       for s in bad), bad
