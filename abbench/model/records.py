"""The records of ``samples.jsonl``, typed: one frozen model per kind.

Every line of a run's samples file is one record; ``type`` says its kind, and a
``sample`` is told apart by what it carries (a collector's window names its
``collector``, a quality check's its ``quality``, a load level its ``level``; else it
is one decode request). :data:`Record` is the union, :func:`parse_record` the one way
from stored data to a model; :meth:`Stored.data` the way back, with the keys in the
order they were given (a record read and written again keeps its bytes).

Fields abbench does not read stay as they were stored (extra fields are kept), and
a field a record lacks takes its default, so old run folders load as they are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, ClassVar, Literal, TypedDict, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from abbench.model.rows import RowKey
from abbench.model.schedule import Slot

#: a stored number: kept an int when it was one (a count), else a float
Number = int | float


class At(TypedDict):
    """Where a record was measured: the server life, its arm, round and position."""

    slot: int
    arm: str
    round: int
    position: int


def at(slot: Slot) -> At:
    """The fields every record of one server life starts with."""
    return {"slot": slot.index, "arm": slot.arm, "round": slot.round,
            "position": slot.position}


class Stored(BaseModel):
    """A frozen model that keeps unknown fields and the order its keys came in."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)
    #: the record's tag in :data:`Record` (see :func:`_kind`)
    tag: ClassVar[str] = "other"
    _order: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        made = handler(data)
        if isinstance(data, Mapping) and isinstance(made, Stored):
            names = {n: f.alias or n for n, f in cls.model_fields.items()}
            order: list[str] = [names.get(str(k), str(k)) for k in data]
            if "type" in cls.model_fields and "type" not in order:  # made here, not read
                made.__pydantic_fields_set__.add("type")
                after = [i for i, k in enumerate(order) if k in At.__annotations__]
                order.insert(after[-1] + 1 if after else 0, "type")
            made._order = tuple(order)
        return made

    @model_serializer(mode="wrap")
    def _in_order(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        out: dict[str, object] = handler(self)
        first = {k: out[k] for k in self._order if k in out}
        return {**first, **{k: v for k, v in out.items() if k not in first}}

    def data(self) -> dict[str, object]:
        """The record as plain JSON data: the fields it was given, in their order."""
        out: dict[str, object] = self.model_dump(by_alias=True, exclude_unset=True)
        return out


class SideCall(Stored):
    """One side call beside a long decode (in its sample's ``side_calls``)."""

    ok: bool = True
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Record(Stored):
    """What every record says about where it was measured; gathered campaigns add the
    shard folder (``host``), the shard and the shard's own numbers."""

    slot: int | None = None
    arm: str
    round: int
    position: int | None = None
    host: str | None = None
    shard: int | None = None
    shard_round: int | None = None
    shard_slot: int | None = None


class SlotRecord(_Record):
    """One server life ended: ok, failed (with the reason) or interrupted."""

    tag = "slot"
    type: Literal["slot"] = "slot"
    status: str
    reason: str | None = None
    t_start: Number | None = None
    t_end: Number | None = None
    exit_code: int | None = None
    log: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failed(self) -> bool:
        return self.status == "failed"


class Sample(_Record):
    """A measurement: the values of one row (``workload``) in one server life."""

    type: Literal["sample"] = "sample"
    workload: str
    rep: int | None = None
    t: Number | None = None
    valid: bool = False
    status: str | None = None
    reason: str | None = None
    metrics: dict[str, Number | None] = Field(default_factory=dict)


class WorkloadSample(Sample):
    """A sample of the workload's own requests (a decode or a load level): it feeds a
    row of the table, whose :class:`RowKey` it gives."""

    context: int | None = None
    decode_tokens: int | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    side_calls: list[SideCall] | None = None
    #: seconds from the send to the last token
    t_last_s: Number | None = None
    system_fingerprint: str | None = None
    server_metrics: dict[str, object] | None = None

    def row_key(self, metric: str = "") -> RowKey:
        """The row of this sample's ``metric`` (its whole key, not only its row id)."""
        return RowKey(self.workload, metric, self.context, self.decode_tokens,
                      self.side_calls is not None)


class DecodeSample(WorkloadSample):
    """One decode request (and its side calls) at one context."""

    tag = "decode"


class LoadSample(WorkloadSample):
    """One load level's window (its requests are ``load_request`` records)."""

    tag = "load"
    level: str
    concurrency: int | None = None
    rate: Number | None = None
    sent_req_s: Number | None = None
    client_cpu_share: Number | None = None


class CollectorSample(Sample):
    """A collector's window: memory peaks, a counter's rate, a response field."""

    tag = "collector"
    collector: str
    window: str | None = None
    #: metric -> why it could not be measured
    unavailable: dict[str, str] | None = None
    period_ms: Number | None = None
    source: str | None = None
    #: a metric of the user's own: its name, label, unit and direction
    spec: dict[str, object] | None = None


class QualitySample(Sample):
    """A quality check's score in one server life (suite or command)."""

    tag = "quality"
    quality: dict[str, object]


class DriftRecord(_Record):
    """GPU clocks, temperature, power and CPU load over one server life."""

    tag = "drift"
    type: Literal["drift"] = "drift"
    #: signal -> mean, min, max, n
    signals: dict[str, dict[str, Number]] = Field(default_factory=dict)
    period_s: Number | None = None
    warn_pct: Number = 5.0


class CountersRecord(_Record):
    """Which configured Prometheus counters a server exposes (once per life)."""

    tag = "counters"
    type: Literal["counters"] = "counters"
    collector: str | None = None
    ok: bool = False
    reason: str | None = None
    missing: list[str] = Field(default_factory=list)


class FlushRecord(_Record):
    """A cache flush as a workload window opened."""

    tag = "flush"
    type: Literal["flush"] = "flush"
    workload: str
    path: str | None = None
    ok: bool = False
    reason: str | None = None


class FingerprintOutput(_Record):
    """One greedy output of a fingerprint prompt set."""

    tag = "fingerprint_output"
    type: Literal["fingerprint_output"] = "fingerprint_output"
    pass_: str = Field(alias="pass")
    set: str
    id: str | None = None
    index: int = 0
    text: str | None = None
    tokens: list[object] | None = None
    prompt: str | None = None


class FingerprintRecord(_Record):
    """A prompt set's fingerprint in one server life (None when a prompt failed)."""

    tag = "fingerprint"
    type: Literal["fingerprint"] = "fingerprint"
    pass_: str = Field(alias="pass")
    set: str
    prompts: int = 0
    max_tokens: int | None = None
    fingerprint: str | None = None


class QualityItemRecord(_Record):
    """One item of a quality suite: its output and verdict."""

    tag = "quality_item"
    type: Literal["quality_item"] = "quality_item"
    suite: str = "?"
    id: str | None = None
    index: int = 0
    passed: bool | None = None
    verdict: str | None = None
    output: str | None = None


class QualityCommand(_Record):
    """One run of a quality command."""

    tag = "quality_command"
    type: Literal["quality_command"] = "quality_command"
    stdout: str | None = None
    stderr: str | None = None
    error: str | None = None


class LoadRequest(_Record):
    """One request of a load level (the level's sample aggregates them)."""

    tag = "load_request"
    type: Literal["load_request"] = "load_request"
    workload: str
    warmup: bool = False
    status: str | None = None
    reason: str | None = None
    tokens_per_chunk: str | None = None


class SystemFingerprintRecord(_Record):
    """The distinct ``system_fingerprint`` values (vLLM) of one server life."""

    tag = "system_fingerprint"
    type: Literal["system_fingerprint"] = "system_fingerprint"
    fingerprints: list[str] = Field(default_factory=list)


class OtherRecord(Stored):
    """A record of a kind this abbench does not know (another tool's): kept, unread."""

    tag = "other"
    type: object = None
    slot: int | None = None
    arm: str | None = None
    round: int | None = None
    host: str | None = None


_KINDS: tuple[type[Stored], ...] = (
    SlotRecord, DecodeSample, LoadSample, CollectorSample, QualitySample, DriftRecord,
    CountersRecord, FlushRecord, FingerprintOutput, FingerprintRecord, QualityItemRecord,
    QualityCommand, LoadRequest, SystemFingerprintRecord)
_TYPES = {k.model_fields["type"].default for k in _KINDS}


def _kind(value: Any) -> str:
    """The tag of stored data (or of a model) in :data:`Record`."""
    if isinstance(value, Stored):
        return str(getattr(value, "tag", "other"))
    if not isinstance(value, Mapping):
        return "other"
    kind = value.get("type")
    if kind == "sample":
        for field_name in ("collector", "quality", "level"):
            if value.get(field_name) is not None:
                return field_name if field_name != "level" else "load"
        return "decode"
    return kind if isinstance(kind, str) and kind in _TYPES else "other"


Record = Annotated[
    Union[  # noqa: UP007
        Annotated[SlotRecord, Tag("slot")],
        Annotated[DecodeSample, Tag("decode")],
        Annotated[LoadSample, Tag("load")],
        Annotated[CollectorSample, Tag("collector")],
        Annotated[QualitySample, Tag("quality")],
        Annotated[DriftRecord, Tag("drift")],
        Annotated[CountersRecord, Tag("counters")],
        Annotated[FlushRecord, Tag("flush")],
        Annotated[FingerprintOutput, Tag("fingerprint_output")],
        Annotated[FingerprintRecord, Tag("fingerprint")],
        Annotated[QualityItemRecord, Tag("quality_item")],
        Annotated[QualityCommand, Tag("quality_command")],
        Annotated[LoadRequest, Tag("load_request")],
        Annotated[SystemFingerprintRecord, Tag("system_fingerprint")],
        Annotated[OtherRecord, Tag("other")],
    ],
    Discriminator(_kind),
]

_RECORD: TypeAdapter[Record] = TypeAdapter(Record)


def parse_record(data: Mapping[str, object]) -> Record:
    """Stored data as its record model; :class:`RecordError` says what is wrong."""
    try:
        return _RECORD.validate_python(data)
    except ValidationError as e:
        raise RecordError(_problem(e, data)) from None


def parse_records(rows: Iterable[Mapping[str, object]]) -> list[Record]:
    return [parse_record(r) for r in rows]


class RecordError(ValueError):
    """A stored record that is not one abbench can read (the store adds the file and
    line)."""


def _problem(e: ValidationError, data: Mapping[str, object]) -> str:
    err = e.errors()[0]
    loc = [p for p in err["loc"] if isinstance(p, str | int)][1:]  # without the kind tag
    where = ".".join(str(p) for p in loc) or "the record"
    kind = f"a {data.get('type')!s} record" if data.get("type") else "a record"
    if err["type"] == "missing":
        return f"{kind} without {where}"
    return f"{kind} whose {where} is {err['input']!r}: {err['msg'].lower()}"
