"""Quality checks, fingerprints and their report: pure units, no server."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from abbench.config.loader import config_from_data
from abbench.config.quality import Check, NonceSet, PromptItem, QualityItem
from abbench.errors import ConfigError
from abbench.model.records import parse_records
from abbench.quality.checks import (
    DEFAULT_SUITE,
    evaluate,
    load_item_file,
    numbers_in,
    parse_score,
    run_command,
)
from abbench.quality.fingerprints import FingerprintTask, fingerprint, nonce_prompts
from abbench.report.markdown import render_markdown
from abbench.report.quality_summary import char_divergence, stability, token_divergence
from abbench.report.quality_text import diff_text
from abbench.report.table import table_of
from tests.conftest import no_process_left, started_pids
from tests.recordkit import lives


def _cfg(tmp_path: Path, **extra: object):
    data = {"arms": [{"name": "a", "start": ["x", "{port}"]},
                     {"name": "b", "start": ["x", "{port}"]}],
            "workloads": [{"contexts": [64]}], **extra}
    return config_from_data(data, source=str(tmp_path / "arms.yaml"))


# ------------------------------------------------------------------ checks


@pytest.mark.parametrize(("check", "output", "ok"), [
    ({"exact": "OK"}, "  ok\n", True),
    ({"exact": "OK", "ignore_case": False}, "ok", False),
    ({"exact": "tac"}, "The word is tac", False),
    ({"contains": "Paris"}, "The capital is paris.", True),
    ({"contains": ["Paris", "France"]}, "Paris is nice", False),
    ({"regex": r"\bAu\b", "ignore_case": False}, "symbol: Au.", True),
    ({"regex": r"\bAu\b", "ignore_case": False}, "symbol: au.", False),
    ({"number": 56}, "56 is the answer", True),
    ({"number": 56}, "7 times 8 is 56", False),  # first number is 7
    ({"number": 56, "pick": "last"}, "7 times 8 is 56", True),
    ({"number": 56, "pick": "any"}, "7 times 8 is 56.", True),
    ({"number": 3.14, "tolerance": 0.01}, "pi is about 3.1416", True),
    ({"number": 1000}, "it costs 1,000 dollars", True),
    ({"number": 5}, "no digits here", False),
])
def test_checks(check: dict, output: str, ok: bool) -> None:
    passed, verdict = evaluate(Check(**check), output)
    assert passed is ok
    assert (verdict == "pass") is ok
    if not ok:
        assert verdict.startswith("fail: ")


def test_number_verdict_says_what_it_got() -> None:
    ok, verdict = evaluate(Check(number=391, pick="last"), "23 * 17 = 389")
    assert not ok and verdict == "fail: expected 391, got last number 389"
    assert numbers_in("-2.5 and .5 and 1,024") == [-2.5, 0.5, 1024.0]


def test_check_needs_exactly_one_kind() -> None:
    with pytest.raises(ValueError, match="exactly one of"):
        Check(exact="a", contains="b")
    with pytest.raises(ValueError, match="got none"):
        Check()


# ------------------------------------------------------------- item files


def test_default_suite_loads() -> None:
    suite = load_item_file(DEFAULT_SUITE, QualityItem, key="items")
    assert suite.name == "default"
    assert 12 <= len(suite.items) <= 20
    assert len({it.id for it in suite.items}) == len(suite.items)
    assert any(it.messages for it in suite.items) and any(it.prompt for it in suite.items)


def test_jsonl_suite_and_default_ids(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps({"prompt": "2+2=", "check": {"number": 4}}) + "\n\n"
                 + json.dumps({"id": "x", "messages": [{"role": "user", "content": "hi"}],
                               "check": {"contains": "hello"}}) + "\n")
    f = load_item_file(p, QualityItem, key="items")
    assert f.name == "s" and [it.id for it in f.items] == ["p1", "x"]
    assert f.items[1].chat() == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("body", "message"), [
    ("items: []\n", "no items"),
    ("items:\n  - {prompt: a, check: {exact: b}}\n  - {id: p1, prompt: c, check: {exact: d}}\n",
     "repeated ids: p1"),
    ("items:\n  - {prompt: a, messages: [{role: user, content: b}], check: {exact: b}}\n",
     "items[0]: (item): give exactly one of prompt: and messages:"),
    ("items:\n  - {prompt: a}\n", "items[0]: check: Field required"),
    ("items:\n  - {prompt: a, check: {exact: b}}\nsuite: x\n", "unknown key(s) suite"),
])
def test_bad_suite_files_name_the_place(tmp_path: Path, body: str, message: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(body)
    with pytest.raises(ConfigError, match=None) as e:
        load_item_file(p, QualityItem, key="items")
    assert message in str(e.value)
    assert e.value.where == str(p)


def test_config_sections(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, quality={"command": "q --url {base_url}", "every": 2},
               fingerprints={"sets": ["basics", "x/y.yaml",
                                      {"name": "n", "nonce": {"count": 3}}]})
    assert cfg.quality is not None and cfg.quality.suite == "default"
    refs = cfg.fingerprints.sets
    assert [r.name for r in refs] == ["basics", None, "n"]
    assert refs[1].path == "x/y.yaml"
    with pytest.raises(ConfigError, match="needs a suite, a command, or both"):
        _cfg(tmp_path, quality={"suite": None})
    with pytest.raises(ConfigError, match="nonce prompt set needs a name"):
        _cfg(tmp_path, fingerprints={"sets": [{"nonce": {"count": 2}}]})


def test_unknown_prompt_set_lists_the_known(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "basics.yaml").write_text("prompts: [{prompt: hi}]\n")
    cfg = _cfg(tmp_path, fingerprints={"sets": ["basic"]})
    with pytest.raises(ConfigError, match="no prompt set named 'basic'") as e:
        FingerprintTask(cfg, cfg.fingerprints, cold=True)
    assert "basics" in (e.value.hint or "")
    cfg = _cfg(tmp_path, fingerprints={"sets": ["basics"], "max_tokens": 5})
    sets = FingerprintTask(cfg, cfg.fingerprints, cold=True).sets(run_seed=1)
    assert sets[0].name == "basics" and sets[0].max_tokens == 5


# ------------------------------------------------------ fingerprints, nonces


def test_fingerprint_is_16_hex_ordered_and_unambiguous() -> None:
    fp = fingerprint(["a", "b"])
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert fp == fingerprint(["a", "b"])
    assert fp != fingerprint(["b", "a"])
    assert fingerprint(["ab", ""]) != fingerprint(["a", "b"])


def test_nonce_prompts_are_seeded_and_unique() -> None:
    a = nonce_prompts(NonceSet(count=20, words=8), seed=7)
    b = nonce_prompts(NonceSet(count=20, words=8), seed=7)
    c = nonce_prompts(NonceSet(count=20, words=8), seed=8)
    assert [p.prompt for p, _ in a] == [p.prompt for p, _ in b]
    assert [n for _, n in a] != [n for _, n in c]
    nonces = [n for _, n in a]
    assert len(set(nonces)) == 20
    assert all(p.prompt.startswith(f"Note {n}.") for p, n in a)
    assert [p.id for p, _ in a][:2] == ["n1", "n2"]


def test_divergence_positions() -> None:
    assert char_divergence("abc", "abc") is None
    assert char_divergence("abc", "abd") == 2
    assert char_divergence("ab", "abc") == 2
    assert token_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert token_divergence([1, 2], [1, 2]) is None
    assert token_divergence([], [1]) is None


def test_stability_words() -> None:
    assert stability({0: "f", 1: "f", 2: "f"}) == "stable in 3 of 3 cold starts"
    assert stability({0: "f", 1: "g", 2: "f"}) == \
        "differed in 1 of 3 cold starts: round 1 (`g`)"
    assert "requests failed in round(s) 2" in stability({0: "f", 1: "f", 2: None})


# ------------------------------------------------------------ command path


def test_parse_score() -> None:
    assert parse_score("log line\n14/15\n") == (14, 15)
    assert parse_score('{"passed": 3, "total": 5}\n') == (3, 5)
    assert parse_score('3/5\n{"note": 1}\n') == (3, 5)
    with pytest.raises(ValueError, match="impossible score 6/5"):
        parse_score("6/5")
    with pytest.raises(ValueError, match="no line"):
        parse_score("all good\n")


def test_run_command_keeps_output_and_times_out(tmp_path: Path) -> None:
    script = tmp_path / "q.py"
    script.write_text("import sys, time\nprint('checking', sys.argv[1], file=sys.stderr)\n"
                      "if sys.argv[1] == 'slow': time.sleep(30)\n"
                      "if sys.argv[1] == 'bad': sys.exit(3)\nprint('4/6')\n")
    ok = run_command(f"{sys.executable} q.py {{arm}}", {"arm": "fast"}, cwd=tmp_path,
                     timeout=30, out_dir=tmp_path / "out", stem="a-r0")
    assert (ok.passed, ok.total, ok.error) == (4, 6, None)
    assert ok.stderr_path.read_text() == "checking fast\n"
    assert ok.stdout_path.read_text() == "4/6\n"
    bad = run_command(f"{sys.executable} q.py {{arm}}", {"arm": "bad"}, cwd=tmp_path,
                      timeout=30, out_dir=tmp_path / "out", stem="b-r0")
    assert bad.error == "exited with code 3" and bad.passed is None
    slow = run_command(f"{sys.executable} q.py {{arm}}", {"arm": "slow"}, cwd=tmp_path,
                       timeout=0.5, out_dir=tmp_path / "out", stem="c-r0")
    assert slow.error == "timed out after 0.5 s (quality.timeout)"
    # killed, not waited for: it never reached its score line, nothing of it is left
    assert slow.stdout_path.read_text() == "" and no_process_left(started_pids())
    with pytest.raises(ConfigError, match="unknown placeholder"):
        run_command("q {nope}", {}, cwd=tmp_path, timeout=1, out_dir=tmp_path, stem="x")


# ------------------------------------------------------------------ report


META = {"id": "r1", "arms": [{"name": "a", "label": "A"}, {"name": "b", "label": "B"}],
        "baseline": "a", "rounds": 3, "order": "interleaved", "seed": 1}


def _fp_records(arm: str, rnd: int, texts: list[str], pass_: str = "cold") -> list[dict]:
    recs = [{"type": "fingerprint_output", "set": "s", "pass": pass_, "arm": arm,
             "round": rnd, "id": f"p{i + 1}", "index": i, "text": t,
             "tokens": t.split(" ")} for i, t in enumerate(texts)]
    recs.append({"type": "fingerprint", "set": "s", "pass": pass_, "arm": arm, "round": rnd,
                 "prompts": len(texts), "max_tokens": 8, "fingerprint": fingerprint(texts)})
    return recs


def _score(arm: str, rnd: int, passed: int, total: int = 15) -> dict:
    return {"type": "sample", "workload": "server", "arm": arm, "round": rnd, "valid": True,
            "metrics": {"quality": passed, "quality_total": total}}


def _records() -> list[dict]:
    base = ["x y z", "one two three", "same"]
    other = ["x y w", "one two three", "sa me"]
    recs: list[dict] = []
    for r in range(3):
        recs += _fp_records("a", r, base)
        recs += _fp_records("b", r, other if r != 2 else ["q", *other[1:]])
        recs += [_score("a", r, 14), _score("b", r, 13)]
    recs.append({"type": "quality_item", "arm": "b", "round": 0, "suite": "default",
                 "id": "multiply", "index": 3, "passed": False,
                 "verdict": "fail: expected 56, got first number 7",
                 "output": "To find 7 times 8 | more"})
    return recs


def test_report_section_and_score_row() -> None:
    md = render_markdown(table_of(parse_records(lives(_records())), META))
    assert "| quality score | 14/15 | 13/15 (-1 passed) |" in md
    fa, fb = fingerprint(["x y z", "one two three", "same"]), fingerprint(
        ["x y w", "one two three", "sa me"])
    assert f"| A | `{fa}` | stable in 3 of 3 cold starts | baseline |" in md
    odd = fingerprint(["q", "one two three", "sa me"])
    assert (f"| B | `{fb}` | differed in 1 of 3 cold starts: round 2 (`{odd}`) | "
            "2 of 3 prompts differ: p1 (token 2, char 4), p3 (token 0, char 2) |") in md
    assert "`default/multiply` (round 0): fail: expected 56, got first number 7; output " \
        "'To find 7 times 8 \\| more'" in md


def test_score_row_renders_rounds_when_they_differ() -> None:
    recs = [_score("a", 0, 14), _score("a", 1, 15), _score("b", 0, 15), _score("b", 1, 15)]
    md = render_markdown(table_of(parse_records(lives(recs)), META))
    assert "| quality score | 14/15 / 15/15 | 15/15 (+0.5 passed) |" in md


def test_diff_text_marks_the_divergence() -> None:
    text = diff_text(parse_records(_records()), META, set_name="s", arms=["a", "b"], round_=0,
                     width=20)
    assert text.splitlines()[0] == ("prompt set s, cold pass, round 0: a against b: "
                                    "2 of 3 prompts differ")
    assert "p1: diverges at token 2, char 4 (marked ⟦)" in text
    assert "x y ⟦z" in text and "x y ⟦w" in text
    only = diff_text(parse_records(_records()), META, set_name="s", arms=["a", "b"], prompt="p2")
    assert "p2: identical outputs" in only
    with pytest.raises(ConfigError, match="no cold outputs of prompt set 'zz'"):
        diff_text(parse_records(_records()), META, set_name="zz", arms=["a", "b"])
    with pytest.raises(ConfigError, match="no arm 'c'"):
        diff_text(parse_records(_records()), META, set_name="s", arms=["a", "c"])


def test_prompt_item_needs_one_prompt() -> None:
    with pytest.raises(ValueError, match="exactly one of prompt"):
        PromptItem(id="x")


def test_report_json_carries_the_comparison() -> None:
    from abbench.report.formats import render_json

    data = json.loads(render_json(table_of(parse_records(lives(_records())), META)))
    (s,) = data["quality"]["sets"]
    assert s["name"] == "s" and s["against_baseline"][0]["differ"] == 2
    assert s["against_baseline"][0]["prompts"][0] == {"id": "p1", "char": 4, "token": 2}
    assert data["quality"]["failed_items"][0]["id"] == "multiply"


def test_failed_command_and_invalid_score_are_reported() -> None:
    recs = [_score("a", 0, 3, 5),
            {"type": "quality_command", "arm": "b", "round": 0, "error": "exited with code 3",
             "stdout": "quality/b-r0.stdout", "stderr": "quality/b-r0.stderr"},
            {"type": "sample", "workload": "server", "arm": "b", "round": 0, "valid": False,
             "status": "failed", "metrics": {}, "reason": "quality command exited with code 3"}]
    md = render_markdown(table_of(parse_records(lives(recs)), META))
    assert ("Quality command failed: arm b, round 0: exited with code 3 "
            "(stderr: quality/b-r0.stderr).") in md
    assert "| quality score | 3/5 | no data |" in md
    assert "Invalid samples (wrong token count or failed; left out): B: 1." in md


def test_item_tests_exact_mcnemar_on_majority_verdicts() -> None:
    from scipy.stats import binomtest

    from abbench.report.quality_summary import item_tests, summarize
    from abbench.report.quality_text import to_json

    def rec(arm: str, item: int, round_: int, passed: bool) -> dict:
        return {"type": "quality_item", "arm": arm, "suite": "basics", "id": f"q{item}",
                "round": round_, "passed": passed}

    records = []
    for r in range(3):
        records += [rec("base", i, r, True) for i in range(10)]
        # the arm fails items 0-7 in every round; item 8 passes in 2 of 3 rounds (its
        # majority: pass); item 9 passes in every round
        records += [rec("cand", i, r, i >= 8 and not (i == 8 and r == 1)) for i in range(10)]
    records.append({"type": "quality_item", "arm": "cand", "suite": "basics", "id": "q9",
                    "round": 3, "error": "HTTP 500"})  # no verdict: not a vote
    (t,) = item_tests(parse_records(records), ["base", "cand"], "base")
    assert (t.items, t.lost, t.gained) == (10, 8, 0)
    assert t.p == binomtest(0, 8, 0.5).pvalue == 2 * 0.5 ** 8
    assert t.reading() == "quality lost"
    q = summarize(parse_records(records), ["base", "cand"], "base")
    assert to_json(q)["item_tests"][0]["reading"] == "quality lost"
    # the run's alpha
    (strict,) = item_tests(parse_records(records), ["base", "cand"], "base", alpha=0.005)
    assert strict.reading() == "no significant change"  # p = 2/256 > 0.005

    same = [rec(a, i, 0, i % 2 == 0) for a in ("base", "cand") for i in range(6)]
    (u,) = item_tests(parse_records(same), ["base", "cand"], "base")
    assert (u.lost, u.gained, u.p, u.reading()) == (0, 0, 1.0, "same verdict on every item")
    swap = [rec("base", 0, 0, True), rec("cand", 0, 0, False),
            rec("base", 1, 0, False), rec("cand", 1, 0, True)]
    (v,) = item_tests(parse_records(swap), ["base", "cand"], "base")
    assert (v.lost, v.gained, v.p, v.reading()) == (1, 1, 1.0, "no significant change")
