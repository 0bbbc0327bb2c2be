"""The typed records of samples.jsonl: every stored run folder loads into them and
writes back byte for byte; a line that is no record abbench can read is a StoreError
naming the file and line."""

from __future__ import annotations

import os
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
    assert decode.row_key() == RowKey("decode 1K", "", 1024, 64, True)
    assert decode.row_key("ttft_ms") == RowKey("decode 1K", "ttft_ms", 1024, 64, True)
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


def _slot(arm: str, round_: int) -> SlotRecord:
    return SlotRecord(slot=0, arm=arm, round=round_, position=0, status="ok")


def test_records_reads_only_what_was_appended_and_equals_a_fresh_read(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.append(_slot("a", 0))
    first = run.records()
    run.append_many([_slot("b", 0), _slot("a", 1)])
    with run.samples_path.open("a", encoding="utf-8") as f:
        f.write("not json\n\n")
    problems: list[str] = []
    again = run.records(problems)
    assert again[0] is first[0]  # parsed once, kept
    fresh: list[str] = []
    assert again == Run(tmp_path).records(fresh) == list(iter_records(run.samples_path))
    assert problems == fresh == [f"{run.samples_path}:4: skipped a corrupt line "
                                 "(Expecting value: line 1 column 1 (char 0))"]
    problems.clear()
    assert run.records(problems) == again and len(problems) == 1  # reported every call


def test_records_parses_a_half_written_tail_each_time_and_keeps_none_of_it(
        tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.append(_slot("a", 0))
    line = record_line(_slot("b", 0))
    with run.samples_path.open("a", encoding="utf-8") as f:
        f.write(line[:-1])  # a whole record, its newline not yet written
    assert [r.arm for r in run.records()] == ["a", "b"]
    with run.samples_path.open("a", encoding="utf-8") as f:
        f.write("\n" + line[:10])  # its newline, then half of the next line
    problems: list[str] = []
    fresh: list[str] = []
    assert [r.arm for r in run.records(problems)] == ["a", "b"]
    assert Run(tmp_path).records(fresh) == run.records()
    assert problems == fresh and len(problems) == 1
    assert problems[0].startswith(f"{run.samples_path}:3: skipped a corrupt line (")
    run.repair_tail()
    run.append(_slot("c", 0))
    problems.clear()
    assert [r.arm for r in run.records(problems)] == ["a", "b", "c"] and problems == []


def test_records_reads_again_a_file_replaced_or_rewritten(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.append_many([_slot("a", 0), _slot("a", 1)])
    assert [r.round for r in run.records()] == [0, 1]
    run.samples_path.write_text(record_line(_slot("z", 0)), encoding="utf-8")  # shorter
    assert [r.arm for r in run.records()] == ["z"]
    run.samples_path.write_text(record_line(_slot("y", 0)) + record_line(_slot("y", 1)),
                                encoding="utf-8")  # in place, longer: its last line differs
    assert [r.arm for r in run.records()] == ["y", "y"]
    tmp = tmp_path / "new.jsonl"
    tmp.write_text("".join(record_line(_slot("x", i)) for i in range(3)), encoding="utf-8")
    os.replace(tmp, run.samples_path)  # another file (atomic rename)
    assert [r.arm for r in run.records()] == ["x", "x", "x"]
    run.samples_path.unlink()
    assert run.records() == []


def test_a_bad_line_appended_later_is_an_error_every_time_and_loses_nothing(
        tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.append(_slot("a", 0))
    assert len(run.records()) == 1
    with run.samples_path.open("a", encoding="utf-8") as f:
        f.write('{"schema": 1, "type": "slot", "arm": "a", "round": "two"}\n')
    for _ in range(2):
        with pytest.raises(StoreError, match="line 2 is not a record"):
            run.records()
