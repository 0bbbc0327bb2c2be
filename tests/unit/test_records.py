"""The typed records of samples.jsonl: every stored run folder loads into them and
writes back byte for byte; a line that is no record abbench can read is a StoreError
naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from abbench.errors import StoreError
from abbench.model.records import (
    CollectorSample,
    DecodeSample,
    FingerprintOutput,
    OtherRecord,
    SlotRecord,
    parse_record,
)
from abbench.model.rows import RowKey
from abbench.store.run import Run, iter_records, record_line

ROOT = Path(__file__).resolve().parents[2]
STORED = sorted([*ROOT.glob("tests/golden/runs/*/samples.jsonl"),
                 *ROOT.glob("docs/examples/**/*-run/samples.jsonl"),
                 *ROOT.parent.glob("shared/fixtures/*/samples.jsonl")])


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_stored_runs_load_and_write_back_byte_for_byte(path: Path) -> None:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
             if line.strip()]
    records = list(iter_records(path))
    assert len(records) == len(lines)
    assert [record_line(r) for r in records] == lines


def test_kinds_row_keys_and_unknown_fields() -> None:
    at = {"slot": 0, "arm": "a", "round": 1, "position": 0}
    decode = parse_record({**at, "type": "sample", "workload": "decode 1K", "context": 1024,
                           "decode_tokens": 64, "side_calls": [], "metrics": {"x": 1},
                           "chunks": 64})
    assert isinstance(decode, DecodeSample)
    assert decode.row_key() == RowKey("decode 1K", 1024, 64, True)
    assert decode.data()["chunks"] == 64 and decode.metrics == {"x": 1}
    assert isinstance(parse_record({**at, "type": "sample", "workload": "server",
                                    "collector": "vram"}), CollectorSample)
    assert isinstance(parse_record({**at, "type": "slot", "status": "ok"}), SlotRecord)
    assert isinstance(parse_record({"type": "someone_elses", "x": 1}), OtherRecord)
    made = FingerprintOutput(**at, pass_="cold", set="s", id="p0")
    assert list(made.data()) == ["slot", "arm", "round", "position", "type", "pass", "set",
                                 "id"]


def test_a_malformed_record_names_the_file_and_line(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.samples_path.write_text(
        '{"schema": 1, "type": "slot", "arm": "a", "round": 0, "status": "ok"}\n'
        '{"schema": 1, "type": "sample", "arm": "a", "round": "two", "workload": "w"}\n')
    with pytest.raises(StoreError) as e:
        run.records()
    text = str(e.value)
    assert str(run.samples_path) in text and "line 2" in text and "round" in text
    assert "hint:" in text
