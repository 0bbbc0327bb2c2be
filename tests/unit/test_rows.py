"""A row is its whole key (row id, metric, context, decode length, side calls), never its
label; labels are made in report/ and a label a user types resolves back to its row."""

from __future__ import annotations

import pytest

from abbench.config.workloads import Workload
from abbench.errors import ConfigError
from abbench.model.records import parse_records
from abbench.model.rounds import round_values
from abbench.model.rows import RowKey
from abbench.report.selection import name_row, name_rows
from abbench.report.table import table_of
from tests.recordkit import lives

META = {"id": "rows", "arms": [{"name": "a"}, {"name": "b"}], "baseline": "a"}


def samples(workload: str, decode_tokens: int, level: float, context: int = 1024):
    return [{"type": "sample", "arm": arm, "round": r, "rep": 0, "workload": workload,
             "context": context, "decode_tokens": decode_tokens, "valid": True,
             "metrics": {"decode_tok_s": level + r * 0.1 + (arm == "b") * 0.01,
                         "ttft_ms": 20.0 + r}}
            for r in range(4) for arm in ("a", "b")]


def test_row_ids_read_right() -> None:
    assert Workload(name="decoder", contexts=[1024]).row_name(1024) == "decoder 1K"
    assert Workload(name="decode-128", contexts=[1024]).row_name(1024) == "decode-128 1K"
    assert Workload(contexts=[32768]).row_name(32768) == "decode 32K"
    side = Workload(contexts=[2048], side_calls={"count": 2})
    assert side.row_name(2048) == "decode 2K + side calls"
    # the name of the H200 A/A run's workloads: its stored rows keep their ids
    assert Workload(name="decode (128 tok)", contexts=[32768]).row_name(32768) == \
        "decode 32K (128 tok)"


def test_the_decoder_workload_gets_its_own_label() -> None:
    table = table_of(parse_records(lives(samples("decoder 1K", 64, 50.0))), META, rows="all")
    labels = {r.label for r in table.rows + table.hidden}
    assert labels == {"decoder 1K (tok/s)", "decoder 1K TTFT (ms)"}


def test_same_row_id_different_decode_length_stays_two_rows() -> None:
    """Two workloads (here of two runs' records) with one context and different
    decode_tokens: their values are never averaged into one row."""
    recs = parse_records(lives(samples("decode 1K", 128, 50.0))
                         + [{**r, "round": r["round"] + 4}
                            for r in lives(samples("decode 1K", 256, 40.0))])
    values = round_values(recs)
    short = RowKey("decode 1K", "decode_tok_s", 1024, 128)
    long = RowKey("decode 1K", "decode_tok_s", 1024, 256)
    assert set(values) >= {short, long}
    assert sorted(values[short]["a"]) == [0, 1, 2, 3]
    assert sorted(values[long]["a"]) == [4, 5, 6, 7]
    assert min(values[short]["a"].values()) > max(values[long]["a"].values())


def test_a_label_resolves_to_its_row() -> None:
    table = table_of(parse_records(lives(samples("decode 1K", 64, 50.0))), META, rows="all")
    rows = table.rows + table.hidden
    keys = [r.key for r in rows]
    (ttft,) = name_rows(["decode 1K TTFT (ms)"], keys, where="--row")
    assert ttft == RowKey("decode 1K", "ttft_ms", 1024, 64)
    assert name_rows(["  Decode 1K  ttft "], keys, where="--row") == [ttft]  # no unit, case
    assert name_row("decode 1K", keys, "ttft_ms", where="--row") == ttft  # id and metric
    with pytest.raises(ConfigError, match="no row 'decode 2K'"):
        name_rows(["decode 2K"], keys, where="--row")


def test_a_label_as_the_table_shows_it_resolves_to_its_row() -> None:
    """What history --workload and bisect --row take: a row id names the row of every
    metric; a label (with or without its unit) names the row of its metric; case and
    spaces do not matter; a text that names nothing is refused with the labels there are."""
    decoder = Workload(name="decoder", contexts=[1024], decode_tokens=64).row_keys()[0]
    decode = Workload(contexts=[32768], decode_tokens=64).row_keys()[0]
    keys = [k.of(m) for k in (decoder, decode) for m in ("decode_tok_s", "ttft_ms")]
    assert name_rows(["decoder 1K"], keys, where="--workload") == [RowKey("decoder 1K")]
    assert name_rows(["Decode  32k TTFT"], keys, where="--workload") == [decode.of("ttft_ms")]
    assert name_rows(["decoder 1K (tok/s)", "decode 32K"], keys, where="--workload") == [
        decoder.of("decode_tok_s"), RowKey("decode 32K")]
    assert name_row("decoder 1K", keys, None, where="--row") == decoder.of("decode_tok_s")
    assert name_row("decoder 1K TTFT (ms)", keys, None, where="--row") == decoder.of("ttft_ms")
    assert name_row("decode 32K", keys, "ttft_ms", where="--row").metric == "ttft_ms"
    with pytest.raises(ConfigError) as e:
        name_rows(["decode 1K"], keys, where="--workload")
    assert e.value.exit_code == 2 and str(e.value).startswith("--workload: no row 'decode 1K'")
    assert e.value.hint == ("name one as the table labels it (the unit may be left out), or "
                            "by its row id: 'decode 32K (tok/s)', 'decoder 1K (tok/s)'")
