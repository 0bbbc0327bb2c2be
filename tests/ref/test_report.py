"""Report formatting, pinned by golden files (UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations


def test_side_calls_wait_behind_a_one_slot_server(tmp_path, results):
    """Side calls run alongside the long decode: against a server with one slot they wait
    for it (and the report says so); with two slots they are served at once."""
    from abbench.campaign.runner import Campaign, RunOptions
    from abbench.config.loader import load_config
    from tests.faultkit import own_refserver, ref_arms

    ref = own_refserver(tmp_path)
    arms = ref_arms(tmp_path / "a.yaml", ref,
                    {"one": ["--rate", "100", "--slots", "1"],
                     "two": ["--rate", "100", "--slots", "2"]},
                    rounds=2, workloads=[{"contexts": [64], "decode_tokens": 60,
                                          "side_calls": {"count": 2, "prompt_tokens": 16,
                                                         "max_tokens": 2, "delay": 0}}])
    out = Campaign(load_config(arms), RunOptions(results=results)).execute()
    assert out.status == "complete"
    first = {arm: [r["side_calls"][0]["latency_ms"] for r in (x.data() for x in out.run.records())
                   if r.get("type") == "sample" and r["arm"] == arm and r.get("valid")]
             for arm in ("one", "two")}
    assert len(first["one"]) == len(first["two"]) == 2
    # 60 tokens at 100/s: the first side call waits ~0.6 s behind the decode on one
    # slot; alongside it takes 2 tokens (~20 ms). Wide margins for a loaded machine.
    assert min(first["one"]) > 400 and max(first["two"]) < 300
    report = (out.run.path / "report.md").read_text()
    assert "arm one's server has one slot (/props total_slots = 1)" in report
    assert "arm two's server" not in report
