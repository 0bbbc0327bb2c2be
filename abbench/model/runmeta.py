"""``run.json`` typed: what a run is (its arms, schedule, settings) and what happened
(status, timing, the --until-ci looks). Frozen models over the stored data: fields
abbench does not read are kept as they were (``extra="allow"``), a missing field takes
its default, so old run folders load as they are; a field of the wrong type is refused
with its path (:class:`MetaError`). Changes go through :meth:`RunMeta.changed` and the
typed helpers of :class:`abbench.store.run.Run`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from abbench.model.schedule import Slot


class _Meta(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    def data(self) -> dict[str, Any]:
        """The stored JSON data: the fields it was read with or given, in their order."""
        out: dict[str, Any] = self.model_dump(mode="json", exclude_unset=True)
        return out


class GitMeta(_Meta):
    """The commit and patch set a git arm was built from."""

    source: str | None = None
    ref: str | None = None
    sha: str | None = None
    patch: list[tuple[str, str]] = Field(default_factory=list)
    describe: str | None = None


class ArmMeta(_Meta):
    """An arm as run.json lists it (``cpus`` and ``nice`` only when the arm sets them)."""

    name: str
    label: str | None = None
    commit: str | None = None
    preset: str | None = None
    series: str | None = None
    cpus: str | None = None
    nice: int | None = None
    git: GitMeta | None = None

    @property
    def shown(self) -> str:
        """The arm's label, else its name: what its column is headed with."""
        return self.label or self.name


class Timing(_Meta):
    """Where the wall time went (seconds), and the readiness lag."""

    wall_s: float | None = None
    server_s: float | None = None
    requests_s: float | None = None
    tasks_s: float | None = None
    overhead_s: float | None = None
    ready_lag_ms_max: float | None = None


class Environment(_Meta):
    """The machine the run ran on (campaign/environment.py); ``gpus`` as NVML named them."""

    host: str | None = None
    cpu: str | None = None
    gpu_summary: str | None = None
    driver: str | None = None
    cuda: str | None = None
    cpu_count: int | None = None
    gpus: list[dict[str, Any]] = Field(default_factory=list)


class GpuId(_Meta):
    name: str | None = None
    uuid: str | None = None


class HostFingerprint(_Meta):
    """What decides whether two shard hosts' ratios can be compared."""

    hostname: str | None = None
    gpus: list[GpuId] = Field(default_factory=list)
    driver: str | None = None
    cuda: str | None = None
    cpu: str | None = None


class ShardMeta(_Meta):
    """A shard's run: its index in the campaign and the campaign's rounds it ran."""

    index: int
    campaign: str | None = None
    campaign_dir: str | None = None
    rounds: list[int] = Field(default_factory=list)
    campaign_seed: int | None = None


class HostMeta(_Meta):
    """One shard folder of a gathered campaign, as its report lists it."""

    name: str
    shard: int | None = None
    hostname: str | None = None
    rounds: int = 0
    status: str | None = None
    fingerprint: HostFingerprint = Field(default_factory=HostFingerprint)
    machine: str | None = None


class ShardProgress(_Meta):
    done: int
    planned: int


class CampaignMeta(_Meta):
    """A gathered campaign: shards, whether Slurm ran them, the hosts' differences."""

    shards: int | None = None
    slurm: bool = False
    gathered: str | None = None
    mixed_hosts: list[str] = Field(default_factory=list)
    #: shard index (as text) -> rounds done and planned
    rounds_per_shard: dict[str, ShardProgress] = Field(default_factory=dict)


class ModelFile(_Meta):
    path: str | None = None
    bytes: int | None = None


class PromptDigest(_Meta):
    """A workload's prompt file as the run read it."""

    sha256: str
    chars: int


class Look(_Meta):
    """One --until-ci look: the rounds done and the widest watched half-width (log)."""

    rounds: int
    max_half_width: float | None = None


class UntilCiState(_Meta):
    """How --until-ci decided the rounds: the target, the cap, the alphas, each look,
    and why it stopped (None while it has not)."""

    target: float
    max_rounds: int
    alpha_per_look: float | None = None
    alpha_report: float | None = None
    looks: list[Look] = Field(default_factory=list)
    stopped: str | None = None


class RunMeta(_Meta):
    id: str
    schema_: int | None = Field(None, alias="schema")
    created: str | None = None
    finished: str | None = None
    status: str | None = None
    arms: list[ArmMeta] = Field(default_factory=list)
    baseline: str | None = None
    rounds: int | None = None
    rounds_done: int | None = None
    reps: int = 1
    order: str | None = None
    seed: int | None = None
    #: [round, position, arm] per slot, in run order
    schedule: list[tuple[int, int, str]] = Field(default_factory=list)
    #: failed round -> the round that ran it again
    reruns: dict[int, int] = Field(default_factory=dict)
    stats: dict[str, Any] | None = None
    table: dict[str, Any] | None = None
    until_ci: UntilCiState | None = None
    timing: Timing | None = None
    environment: Environment | None = None
    #: arm -> what its server said about itself (llama.cpp /props)
    servers: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: arm -> workload -> the request body sent
    request_templates: dict[str, dict[str, Any]] = Field(default_factory=dict)
    config_digest: str | None = None
    config_path: str | None = None
    pid: int | None = None
    abbench: str | None = None
    #: why the run stopped, when it failed or was interrupted
    error: str | None = None
    warnings: list[str] = Field(default_factory=list)
    #: arm -> the addresses beyond 127.0.0.1 its server listened on
    exposed: dict[str, list[str]] = Field(default_factory=dict)
    #: arm -> its model file (path, bytes)
    models: dict[str, ModelFile] = Field(default_factory=dict)
    #: workload title -> the prompt file it read
    prompts: dict[str, PromptDigest] = Field(default_factory=dict)
    #: each ``--resume``: its pid, the slots it had left, ...
    resumes: list[dict[str, Any]] = Field(default_factory=list)
    #: the seed of the arm orders where it is not ``seed`` (a shard's: the campaign's)
    order_seed_: int | None = Field(None, alias="order_seed")
    shard: ShardMeta | None = None
    host_fingerprint: HostFingerprint | None = None
    campaign: CampaignMeta | None = None
    hosts: list[HostMeta] | None = None

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    @property
    def arm_names(self) -> list[str]:
        return [a.name for a in self.arms]

    @property
    def labels(self) -> dict[str, str]:
        """arm -> its label, else its name."""
        return {a.name: a.shown for a in self.arms}

    @property
    def rounds_shown(self) -> int | None:
        """The rounds the comparison has: those done, else those planned."""
        return self.rounds_done if self.rounds_done is not None else self.rounds

    def arm(self, name: str) -> ArmMeta | None:
        return next((a for a in self.arms if a.name == name), None)

    @property
    def order_seed(self) -> int:
        """The seed the run's arm orders were drawn with (nonce prompt sets derive theirs
        from it): ``order_seed`` where it differs from the run's own ``seed``, else
        ``seed``."""
        return self.order_seed_ if self.order_seed_ is not None else (self.seed or 0)

    def slots(self) -> list[Slot]:
        return [Slot(index=i, round=r, position=p, arm=a)
                for i, (r, p, a) in enumerate(self.schedule)]

    def data(self) -> dict[str, Any]:
        out: dict[str, Any] = self.model_dump(mode="json", exclude_unset=True, by_alias=True)
        return out


class MetaError(ValueError):
    """run.json holds a field of the wrong type: each problem with its path."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


#: run.json typed, or its data as tests and scripts write it by hand
MetaLike = RunMeta | Mapping[str, Any]


def as_meta(meta: MetaLike) -> RunMeta:
    """The typed run.json of a caller holding either (tests and scripts build the data
    by hand)."""
    return meta if isinstance(meta, RunMeta) else parse_meta(meta)


def parse_meta(data: Mapping[str, Any]) -> RunMeta:
    """run.json's data as a :class:`RunMeta`; :class:`MetaError` names each bad field
    (``arms.0.name: Input should be a valid string (got 3)``)."""
    try:
        return RunMeta.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors(include_url=False):
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            got = repr(err.get("input"))
            got = got if len(got) <= 60 else got[:57] + "..."
            problems.append(f"{where}: {err['msg']} (got {got})")
        raise MetaError(problems) from None
