"""Slurm backend: one ``sbatch`` job array per stage, one command per array task.

Calls the Slurm commands (``sbatch``, ``squeue``, ``scontrol``, ``sacct``, ``scancel``)
through :mod:`subprocess`; the standard library only.

Why ``sbatch`` directly and not submitit: submitit runs Python callables. It pickles
each one into its own folder layout, unpickles it on the node with the same Python
environment, and reads the result back from another pickle. abbench needs only a
command line per array index, and its outcome. A generated bash script is short, and
a person can read it and submit it again by hand (it is kept as
``<output_dir>/<job_id>.sbatch``). Nothing on the node has to import abbench, and
there is no dependency to pin. With the commands we also choose the fallbacks used
when a cluster has no accounting (see below). submitit's job-array helper also wants
the same function for every task; ours are different argv lists.

The files of a task, in ``output_dir`` (give each submission its own folder, on a
filesystem the compute nodes share): ``<job>_<task>.out`` and ``<job>_<task>.err`` (its
stdout and stderr), and ``<job>_<task>.status``. The job's wrapper script rewrites the
status file atomically at each step: ``running HOST PID EPOCH`` when the task starts,
then ``exit RC`` when the command returns, or ``signal TERM RC`` when Slurm sent SIGTERM.
Slurm sends SIGTERM for ``scancel``, for the time limit and for preemption alike.

How :func:`task_states` knows a task's state, best source first:

1. ``squeue -h -r -j JOB -o '%K %T'``: every queued or running task, live.
2. ``scontrol show job -o JOB``: finished tasks too, for MinJobAge after they end
   (300 s by default; the local cluster of scripts/slurm-local.sh keeps a day).
3. ``sacct -n -P -X -j JOB -o JobID,State,ExitCode``: finished tasks for good, where the
   cluster has accounting (``sacct`` says "accounting storage is disabled" otherwise).
4. The status file: ``exit 0`` is COMPLETED, ``exit N`` is FAILED, ``signal TERM`` is
   CANCELLED (it could also have been the time limit or preemption: without accounting,
   nothing else records which).
5. ``<job>.cancel``, where :func:`cancel` notes what it cancels: a task cancelled while
   still pending leaves squeue and scontrol at once, gets no sacct row either (Slurm
   22.05, with accounting), and never writes a status file.

Steps 2 to 5 run only for the tasks that step 1 did not list. For each task, the first
terminal state found wins. A task that no source knows is ``UNKNOWN``: it ended
without accounting and its status file is missing, it started and was killed before
it could write its outcome, or someone else scancel'ed it while it was pending.
:func:`polls` is the one poller (of :func:`wait` and of a campaign's follow); its rule,
:func:`settled`, takes UNKNOWN as final only when two polls in a row return it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time as _time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from abbench.errors import SchedulerError

#: States after which a task will not run again (unless someone requeues it by hand).
TERMINAL_STATES = frozenset({
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL",
    "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "UNKNOWN",
})
#: The one state that means the command ran and exited 0.
SUCCESS = "COMPLETED"
#: Ours, not Slurm's: no source knows the task (see the module docstring).
UNKNOWN = "UNKNOWN"

_HINT_INSTALL = ("run `bash scripts/slurm-local.sh up` (then export the SLURM_CONF it prints) "
                 "or load your cluster's Slurm module")
_HINT_CONTROLLER = ("is slurmctld up? `scontrol ping` says; for the local cluster run "
                    "`bash scripts/slurm-local.sh up` and export the SLURM_CONF it prints")
_TIMEOUT_S = 60.0
_JOB_NAME = re.compile(r"[A-Za-z0-9._+-]{1,128}")
R = TypeVar("R")


def is_terminal(state: str) -> bool:
    """True for a state after which the task will not run again."""
    return state in TERMINAL_STATES


@dataclass(frozen=True)
class TaskFiles:
    """Where one array task's stdout, stderr and status file are."""

    out: Path
    err: Path
    status: Path


def task_files(output_dir: str | os.PathLike[str], job_id: str, task: int) -> TaskFiles:
    """The paths of array task ``task`` of job ``job_id`` submitted into ``output_dir``."""
    stem = Path(output_dir).absolute() / f"{job_id}_{task}"
    return TaskFiles(stem.with_suffix(".out"), stem.with_suffix(".err"),
                     stem.with_suffix(".status"))


# --- running the Slurm commands ----------------------------------------------------------


def _run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command. A missing command or a hang raises SchedulerError; a
    non-zero exit does too when ``check`` (callers that read the error text pass False)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except FileNotFoundError:
        raise SchedulerError(f"{argv[0]} not found on PATH", where=argv[0],
                             hint=_HINT_INSTALL) from None
    except subprocess.TimeoutExpired:
        raise SchedulerError(f"`{shlex.join(argv)}` did not answer in {_TIMEOUT_S:.0f} s",
                             where=argv[0], hint=_HINT_CONTROLLER) from None
    if check and proc.returncode != 0:
        raise SchedulerError(f"`{shlex.join(argv)}` failed (exit {proc.returncode}): "
                             f"{_err_text(proc)}", where=argv[0], hint=_HINT_CONTROLLER)
    return proc


def _err_text(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stderr.strip() or proc.stdout.strip() or "no message").replace("\n", "; ")


def _gone(proc: subprocess.CompletedProcess[str]) -> bool:
    """The controller no longer knows the job (it ended more than MinJobAge ago)."""
    return proc.returncode != 0 and "invalid job id" in proc.stderr.lower()


# --- parsing ----------------------------------------------------------------------------


def parse_task_ids(text: str) -> list[int]:
    """Array task ids from Slurm's range syntax: ``3``, ``2-5``, ``[2-5%1]``, ``1,3,8-12:2``.
    ``N/A`` (not an array task) gives []."""
    text = text.strip().strip("[]")
    text = text.split("%", 1)[0]
    if not text or text in ("N/A", "(null)"):
        return []
    ids: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", part.strip())
        if not m:
            raise ValueError(f"not a Slurm array index range: {text!r}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        ids.extend(range(lo, hi + 1, step))
    return ids


def _state_word(text: str) -> str:
    """``CANCELLED by 0`` (sacct) and ``CANCELLED+`` (truncated) give ``CANCELLED``."""
    words = text.strip().split()
    return words[0].rstrip("+").upper() if words else ""


def parse_squeue(text: str) -> dict[int, str]:
    """Output of ``squeue -h -r -j JOB -o '%K %T'``: one ``TASK STATE`` line per task."""
    states: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        for task in parse_task_ids(fields[0]):
            states[task] = _state_word(fields[1])
    return states


_FIELD = r"(?:^|\s){}=(\S*)"


def parse_scontrol(text: str, job_id: str) -> dict[int, str]:
    """Output of ``scontrol show job -o JOB``: one line per record; the records of array
    job ``job_id`` give ``ArrayTaskId`` (one id, or a range for tasks still pending
    together) and ``JobState``."""
    states: dict[int, str] = {}
    for line in text.splitlines():
        array_job = re.search(_FIELD.format("ArrayJobId"), line)
        task_ids = re.search(_FIELD.format("ArrayTaskId"), line)
        state = re.search(_FIELD.format("JobState"), line)
        if not (array_job and task_ids and state) or array_job.group(1) != job_id:
            continue
        for task in parse_task_ids(task_ids.group(1)):
            states[task] = _state_word(state.group(1))
    return states


def parse_sacct(text: str, job_id: str) -> dict[int, str]:
    """Output of ``sacct -n -P -X -j JOB -o JobID,State,ExitCode``: ``JOB_TASK|STATE|RC``
    lines, ``JOB_[2-5]`` for tasks still pending together, ``CANCELLED by UID``."""
    states: dict[int, str] = {}
    prefix = job_id + "_"
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 2 or not fields[0].startswith(prefix):
            continue
        for task in parse_task_ids(fields[0][len(prefix):]):
            states[task] = _state_word(fields[1])
    return states


def parse_status_file(text: str) -> str | None:
    """A task's status file (written by the job's wrapper) as a state, or None while the
    task runs (``running ...``) or when the file is empty or unreadable."""
    words = text.split()
    if len(words) >= 2 and words[0] == "exit":
        return SUCCESS if words[1] == "0" else "FAILED"
    if words and words[0] == "signal":
        return "CANCELLED"
    return None


# --- the API ----------------------------------------------------------------------------


def submit_array(
    *,
    output_dir: str | os.PathLike[str],
    commands: Sequence[Sequence[str]] | None = None,
    script: str | Sequence[str] | None = None,
    n_tasks: int | None = None,
    job_name: str = "abbench",
    partition: str | None = None,
    gres: str | None = None,
    time: str | None = None,
    exclusive: bool = True,
    env: Mapping[str, str] | None = None,
    max_parallel: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    extra_args: Sequence[str] = (),
) -> str:
    """Submit one job array and return its job id (``sbatch --parsable``).

    Exactly one of:

    - ``commands``: one argv per array index (task ``i`` runs ``commands[i]``, exec'd
      without a shell); ``n_tasks`` is ``len(commands)``.
    - ``script``: bash text (or lines) that every task runs, reading
      ``$SLURM_ARRAY_TASK_ID``; ``n_tasks`` tasks, numbered from 0.

    ``time`` is sbatch's ``--time`` (``MM``, ``HH:MM:SS``, ``D-HH:MM``); ``gres`` its
    ``--gres`` (``gpu:1``); ``exclusive`` asks for whole nodes (a benchmark shares its
    node with nobody); ``max_parallel`` caps the tasks that run at once (``--array=0-N%K``);
    ``env`` is exported in the job on top of the environment sbatch propagates;
    ``extra_args`` go to sbatch as they are (``--account=...``, ``--constraint=...``).
    Files land in ``output_dir`` (see :func:`task_files`). It must be reachable by
    the compute nodes.
    """
    if (commands is None) == (script is None):
        raise ValueError("submit_array needs exactly one of commands= and script=")
    if commands is not None:
        argvs = [list(c) for c in commands]
        if not argvs or any(not a for a in argvs):
            raise ValueError("submit_array: commands must be non-empty argv lists")
        if n_tasks is not None and n_tasks != len(argvs):
            raise ValueError(f"submit_array: n_tasks={n_tasks} but {len(argvs)} commands")
        n_tasks = len(argvs)
        body = _case_body(argvs)
    else:
        assert script is not None
        if n_tasks is None or n_tasks < 1:
            raise ValueError("submit_array(script=...) needs n_tasks >= 1")
        body = script if isinstance(script, str) else "\n".join(script)
    if not _JOB_NAME.fullmatch(job_name):
        raise ValueError(f"job_name {job_name!r}: use letters, digits and ._+- only")
    for key in env or {}:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"env: {key!r} is not a shell variable name")

    out = Path(output_dir).absolute()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SchedulerError(f"cannot create the job's output folder: {e.strerror}",
                             where=str(out), hint="give an output_dir you can write") from None
    array = f"0-{n_tasks - 1}" + (f"%{max_parallel}" if max_parallel else "")
    argv = ["sbatch", "--parsable", f"--array={array}", f"--job-name={job_name}",
            f"--output={out}/%A_%a.out", f"--error={out}/%A_%a.err"]
    if partition:
        argv.append(f"--partition={partition}")
    if gres:
        argv.append(f"--gres={gres}")
    if time:
        argv.append(f"--time={time}")
    if exclusive:
        argv.append("--exclusive")
    if workdir is not None:
        argv.append(f"--chdir={Path(workdir).absolute()}")
    argv.extend(extra_args)

    pending = out / f".submit-{os.getpid()}-{_time.monotonic_ns()}.sbatch"
    pending.write_text(_wrapper(body, out, env or {}, argv))
    proc = _run([*argv, str(pending)], check=False)
    if proc.returncode != 0:
        pending.unlink(missing_ok=True)
        raise SchedulerError(f"sbatch refused the job array: {_err_text(proc)}",
                             where=f"sbatch {shlex.join(argv[2:])}",
                             hint="check the partition, gres and time limit against "
                                  "`sinfo -s` and `scontrol show partition`")
    lines = proc.stdout.strip().splitlines()
    job_id = lines[-1].split(";", 1)[0].strip() if lines else ""
    if not job_id.isdigit():
        pending.unlink(missing_ok=True)
        raise SchedulerError(f"sbatch --parsable printed no job id: {proc.stdout.strip()!r}",
                             where="sbatch", hint=_HINT_CONTROLLER)
    pending.replace(out / f"{job_id}.sbatch")
    return job_id


def _case_body(argvs: list[list[str]]) -> str:
    lines = ['case "$SLURM_ARRAY_TASK_ID" in']
    lines += [f"  {i}) exec {shlex.join(argv)} ;;" for i, argv in enumerate(argvs)]
    lines += ['  *) echo "abbench: no command for array task $SLURM_ARRAY_TASK_ID" >&2;'
              " exit 127 ;;", "esac"]
    return "\n".join(lines)


def _wrapper(body: str, out: Path, env: Mapping[str, str], argv: Sequence[str]) -> str:
    """The batch script: status file, environment, the task's command in a child, and
    its outcome (or the SIGTERM that stopped it) written to the status file."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return f"""#!/bin/bash
# An abbench job array, written by abbench.campaign.slurm and submitted with:
#   {shlex.join(argv)} <this file>
__ab_sig=
trap '__ab_sig=TERM' TERM
__ab_status={shlex.quote(str(out))}/"${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}.status"
__ab_mark() {{ printf '%s\\n' "$1" >"$__ab_status.$$" && mv -f "$__ab_status.$$" "$__ab_status"; }}
__ab_mark "running $(hostname) $$ $(date +%s)"
if [ -n "$__ab_sig" ]; then __ab_mark "signal $__ab_sig 143"; exit 143; fi
{exports}(
{body}
) &
__ab_child=$!
while :; do
  wait "$__ab_child"; __ab_rc=$?
  kill -0 "$__ab_child" 2>/dev/null || break
done
# Slurm signals every process of the task, in no set order: the command may die of
# the SIGTERM before this shell gets its own. Give it a second to arrive.
if [ -z "$__ab_sig" ] && [ "$__ab_rc" -gt 128 ]; then
  sleep 1 & __ab_nap=$!; wait "$__ab_nap"; kill "$__ab_nap" 2>/dev/null
fi
if [ -n "$__ab_sig" ]; then __ab_mark "signal $__ab_sig $__ab_rc"
else __ab_mark "exit $__ab_rc"; fi
exit "$__ab_rc"
"""


def task_states(job_id: str, *, n_tasks: int | None = None,
                output_dir: str | os.PathLike[str] | None = None) -> dict[int, str]:
    """Each array task's state, ``{task: "RUNNING", ...}``, in Slurm's words (squeue's
    long names: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT,
    PREEMPTED, NODE_FAIL, OUT_OF_MEMORY, ...) plus UNKNOWN.

    With ``n_tasks`` every task 0..n_tasks-1 is in the answer (UNKNOWN when no source
    knows it). Give ``output_dir`` (the one the job was submitted with) so that the
    status files are read once Slurm has forgotten a finished task.
    """
    job_id = str(job_id)
    expected = set(range(n_tasks)) if n_tasks is not None else None
    proc = _run(["squeue", "-h", "-r", "-j", job_id, "-o", "%K %T"], check=False)
    if proc.returncode != 0 and not _gone(proc):
        raise SchedulerError(f"squeue failed for job {job_id}: {_err_text(proc)}",
                             where="squeue", hint=_HINT_CONTROLLER)
    states = parse_squeue(proc.stdout) if proc.returncode == 0 else {}

    def settled(found: dict[int, str]) -> bool:
        if expected is None:
            return False  # tasks might exist that nothing has listed yet: ask every source
        return all(t in found and is_terminal(found[t]) for t in expected - states.keys())

    later: dict[int, str] = {}  # finished tasks from scontrol, sacct, status files

    def take(source: dict[int, str]) -> None:
        for task, state in source.items():
            if task in states:
                continue
            if task not in later or (not is_terminal(later[task]) and is_terminal(state)):
                later[task] = state

    if expected is None or not settled(later):
        proc = _run(["scontrol", "show", "job", "-o", job_id], check=False)
        if proc.returncode != 0 and not _gone(proc):
            raise SchedulerError(f"scontrol show job failed for job {job_id}: "
                                 f"{_err_text(proc)}", where="scontrol", hint=_HINT_CONTROLLER)
        take(parse_scontrol(proc.stdout, job_id) if proc.returncode == 0 else {})
    if not settled(later):
        proc = _run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode"],
                    check=False)
        if proc.returncode == 0:  # else no accounting ("storage is disabled") or no slurmdbd
            take(parse_sacct(proc.stdout, job_id))
    if output_dir is not None and not settled(later):
        take(_status_files(Path(output_dir), job_id))
        if not settled(later):
            whole, tasks = _cancel_file(Path(output_dir), job_id)
            cancelled = set(expected or ()) if whole else set()
            take(dict.fromkeys(cancelled | tasks, "CANCELLED"))

    result = dict(later)
    result.update(states)
    for task in expected or ():
        result.setdefault(task, UNKNOWN)
    return dict(sorted(result.items()))


def _cancel_file(output_dir: Path, job_id: str) -> tuple[bool, set[int]]:
    try:
        return parse_cancel_file((output_dir.absolute() / f"{job_id}.cancel").read_text())
    except OSError:
        return False, set()


def _status_files(output_dir: Path, job_id: str) -> dict[int, str]:
    found: dict[int, str] = {}
    for path in output_dir.absolute().glob(f"{job_id}_*.status"):
        task = path.name[len(job_id) + 1:-len(".status")]
        if not task.isdigit():
            continue
        try:
            state = parse_status_file(path.read_text())
        except OSError:
            continue
        if state is not None:
            found[int(task)] = state
    return found


def cancel(job_id: str, task: int | Iterable[int] | None = None, *,
           output_dir: str | os.PathLike[str] | None = None) -> None:
    """Cancel the whole array (``task=None``) or some of its tasks. Cancelling a task
    that has already ended is not an error. Returns once scancel has sent the
    request; the state changes a moment later.

    With ``output_dir`` the cancel is first noted in ``<job>.cancel`` there: Slurm
    keeps no record of a task cancelled while still pending in the array (not in
    squeue, scontrol or sacct; it never wrote a status file), and :func:`task_states`
    then reads it as CANCELLED instead of UNKNOWN."""
    job_id = str(job_id)
    if task is None:
        targets, noted = [job_id], ["all"]
    elif isinstance(task, int):
        targets, noted = [f"{job_id}_{task}"], [str(task)]
    else:
        noted = [str(t) for t in task]
        targets = [f"{job_id}_{t}" for t in noted]
        if not targets:
            return
    if output_dir is not None:
        try:
            with (Path(output_dir).absolute() / f"{job_id}.cancel").open("a") as f:
                f.write("".join(f"{n}\n" for n in noted))
        except OSError as e:
            raise SchedulerError(f"cannot note the cancel: {e.strerror}",
                                 where=str(Path(output_dir).absolute() / f"{job_id}.cancel"),
                                 hint="pass the output_dir the job was submitted with") from None
    proc = _run(["scancel", *targets], check=False)
    if proc.returncode != 0:
        text = _err_text(proc)
        if "already completing or completed" in text.lower() or _gone(proc):
            return
        raise SchedulerError(f"scancel failed: {text}", where=f"scancel {' '.join(targets)}",
                             hint=_HINT_CONTROLLER)


def parse_cancel_file(text: str) -> tuple[bool, set[int]]:
    """``<job>.cancel`` (written by :func:`cancel`): whether the whole job was cancelled,
    and which tasks were."""
    words = text.split()
    return "all" in words, {int(w) for w in words if w.isdigit()}


def count_states(states: Mapping[int, str]) -> str:
    """A one-line summary for progress output: ``2 RUNNING, 5 PENDING, 1 COMPLETED``."""
    counts = Counter(states.values())
    return ", ".join(f"{n} {state}" for state, n in counts.most_common())


def settled(states: Mapping[int, str], unknown_before: set[int]) -> tuple[bool, set[int]]:
    """The one rule of every poll here: the tasks are done when each is terminal and
    no task is UNKNOWN that was not UNKNOWN at the previous poll (UNKNOWN is final only
    when two polls in a row return it). Returns (done, the UNKNOWN tasks now: the next
    poll's ``unknown_before``)."""
    unknown = {t for t, s in states.items() if s == UNKNOWN}
    return bool(states) and all(is_terminal(s) for s in states.values()) \
        and unknown <= unknown_before, unknown


@dataclass(frozen=True)
class Poll(Generic[R]):
    """One reading of :func:`polls`: what was read, the task states in it, whether they
    have settled (:func:`settled`) and whether ``timeout_s`` has passed."""

    reading: R
    states: dict[int, str]
    done: bool
    overdue: bool


def polls(read: Callable[[], R], states_of: Callable[[R], Mapping[int, str]], *,
          poll_s: float, timeout_s: float | None = None,
          sleep: Callable[[float], None] = _time.sleep) -> Iterator[Poll[R]]:
    """The one Slurm poller: ``read()`` every ``poll_s``, each reading yielded with its
    task states (``states_of``), whether they settled and whether the time is up. The
    caller stops iterating when it is done, and raises its own error when overdue (a
    job's wait and a campaign's follow say different things to do)."""
    deadline = None if timeout_s is None else _time.monotonic() + timeout_s
    unknown_before: set[int] = set()  # tasks UNKNOWN at the previous poll
    while True:
        reading = read()
        states = dict(states_of(reading))
        done, unknown_before = settled(states, unknown_before)
        yield Poll(reading, states, done,
                   deadline is not None and _time.monotonic() >= deadline)
        sleep(poll_s)


def wait(job_id: str, *, n_tasks: int | None = None,
         output_dir: str | os.PathLike[str] | None = None,
         on_progress: Callable[[dict[int, str]], None] | None = None,
         poll_s: float = 5.0, timeout_s: float | None = None) -> dict[int, str]:
    """Poll :func:`task_states` every ``poll_s`` until every task is terminal; return the
    final states. ``on_progress`` is called with the states at the first poll and after
    every change. ``timeout_s`` raises SchedulerError when the tasks are still not done
    (they keep running: :func:`cancel` them, or wait again)."""
    job_id = str(job_id)
    last: dict[int, str] | None = None
    empty_before = False  # the previous poll listed no task at all
    for p in polls(lambda: task_states(job_id, n_tasks=n_tasks, output_dir=output_dir),
                   dict, poll_s=poll_s, timeout_s=timeout_s):
        if p.states != last:
            if on_progress is not None:
                on_progress(dict(p.states))
            last = p.states
        if p.done:
            return p.states
        if not p.states and empty_before:
            raise SchedulerError(f"job {job_id} is unknown to squeue, scontrol and sacct",
                                 where=f"job {job_id}",
                                 hint="was it submitted to this cluster? pass n_tasks= and "
                                      "output_dir= so that its status files are read")
        empty_before = not p.states
        if p.overdue:
            raise SchedulerError(f"job {job_id} not done after {timeout_s:g} s: "
                                 f"{count_states(p.states) or 'no tasks listed'}",
                                 where=f"job {job_id}",
                                 hint=f"its tasks keep running; `abbench cancel CAMPAIGN` (or "
                                      f"`scancel {job_id}`) stops them")
    raise AssertionError("polls() ended")  # it never does: it polls until stopped
