"""abbench.campaign.slurm against a real Slurm: the single-node cluster that
scripts/slurm-local.sh brings up on localhost (installing slurm-wlm and munge from apt
when missing), with accounting (slurmdbd on a private MariaDB), so that the sacct path
abbench takes on a real cluster is exercised; ABBENCH_SLURM_ACCOUNTING=0 leaves it out
(about 45 s less on a fresh machine). Skipped only when that cluster cannot be
brought up."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from abbench.campaign import slurm
from tests.conftest import SESSION_VAR

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-local.sh"


def _env() -> dict[str, str]:
    """The script's environment: accounting on unless the caller says otherwise."""
    return {**os.environ,
            "ABBENCH_SLURM_ACCOUNTING": os.environ.get("ABBENCH_SLURM_ACCOUNTING", "1")}


@pytest.fixture(scope="session")
def cluster() -> Iterator[str]:
    """SLURM_CONF of this session's local cluster (state in the session's folder, on
    the session's free ports). The session stops it as it ends (tests/conftest.py), not
    each worker: a worker done with its tests would cancel the jobs of another's."""
    if os.geteuid() != 0:
        pytest.skip("scripts/slurm-local.sh needs root (slurmd starts the jobs)")
    try:
        up = subprocess.run(["bash", str(SCRIPT), "up"], capture_output=True, text=True,
                            timeout=900, check=False, env=_env())
    except subprocess.TimeoutExpired:
        pytest.fail("scripts/slurm-local.sh up took more than 15 minutes")
    if up.returncode != 0:
        pytest.fail(f"Slurm could not be brought up (scripts/slurm-local.sh up, exit "
                    f"{up.returncode}): {up.stderr.strip()[-1500:]}")
    conf = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
    # the session's own cluster: its state in the session's folder (tests/conftest.py)
    assert Path(conf["SLURM_CONF"]).is_relative_to(os.environ[SESSION_VAR]), conf
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", conf["SLURM_CONF"])
        yield conf["SLURM_CONF"]


def wait_for(job: str, n_tasks: int, want: dict[int, str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        states = slurm.task_states(job, n_tasks=n_tasks)
        if all(states[t] == s for t, s in want.items()):
            return
        assert time.monotonic() < deadline, f"waited for {want}, last {states}"
        time.sleep(0.2)


def test_array_of_a_shell_command(cluster: str, tmp_path: Path) -> None:
    seen: list[dict[int, str]] = []
    job = slurm.submit_array(
        output_dir=tmp_path, n_tasks=2, job_name="abbench-test",
        script='echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_TASK_COUNT: $ABBENCH_WORD"; '
               'hostname >&2',
        env={"ABBENCH_WORD": "it's a b"})
    states = slurm.wait(job, n_tasks=2, output_dir=tmp_path, on_progress=seen.append,
                        poll_s=0.5, timeout_s=120)
    assert states == {0: "COMPLETED", 1: "COMPLETED"}
    assert seen[-1] == states
    for task in (0, 1):
        files = slurm.task_files(tmp_path, job, task)
        assert files.out.read_text() == f"task {task} of 2: it's a b\n"
        assert files.err.read_text().strip()  # the node's host name
        assert files.status.read_text() == "exit 0\n"
    assert (tmp_path / f"{job}.sbatch").exists()  # the script, kept for a person to read


def test_one_argv_per_task_and_a_failure(cluster: str, tmp_path: Path) -> None:
    job = slurm.submit_array(output_dir=tmp_path, exclusive=False, commands=[
        ["printf", "%s\n", "a b", "$HOME"],
        ["sh", "-c", "echo oops >&2; exit 3"],
    ])
    assert slurm.wait(job, n_tasks=2, output_dir=tmp_path, poll_s=0.5, timeout_s=120) == {
        0: "COMPLETED", 1: "FAILED"}
    assert slurm.task_files(tmp_path, job, 0).out.read_text() == "a b\n$HOME\n"
    assert slurm.task_files(tmp_path, job, 1).err.read_text() == "oops\n"
    # once the job has ended, squeue no longer lists it; the state comes from scontrol
    live = subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True,
                          check=True).stdout
    assert live.strip() == ""


def test_cancel_one_running_task(cluster: str, tmp_path: Path) -> None:
    job = slurm.submit_array(
        output_dir=tmp_path, n_tasks=2, exclusive=False,  # both at once on the one node
        script='if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then sleep 120; else sleep 4; fi; echo done')
    status = slurm.task_files(tmp_path, job, 1).status
    deadline = time.monotonic() + 60
    while not (status.exists() and status.read_text().startswith("running")):
        assert time.monotonic() < deadline, "task 1 never started"
        time.sleep(0.1)
    slurm.cancel(job, 1, output_dir=tmp_path)  # mid-run: its wrapper is up
    states = slurm.wait(job, n_tasks=2, output_dir=tmp_path, poll_s=0.5, timeout_s=300)
    assert states == {0: "COMPLETED", 1: "CANCELLED"}  # the 120 s sleep's end: COMPLETED
    assert slurm.task_files(tmp_path, job, 0).out.read_text() == "done\n"
    assert slurm.task_files(tmp_path, job, 1).status.read_text() == "signal TERM 143\n"


def test_cancel_a_pending_task(cluster: str, tmp_path: Path) -> None:
    job = slurm.submit_array(output_dir=tmp_path, n_tasks=3, max_parallel=1, exclusive=False,
                             script="sleep 2")
    wait_for(job, 3, {0: "RUNNING", 2: "PENDING"})
    slurm.cancel(job, 2, output_dir=tmp_path)
    # Slurm keeps nothing of a task cancelled while pending: only the note that
    # cancel() left in output_dir says what became of it
    wait_for(job, 3, {2: "UNKNOWN"})
    states = slurm.wait(job, n_tasks=3, output_dir=tmp_path, poll_s=0.5, timeout_s=120)
    assert states == {0: "COMPLETED", 1: "COMPLETED", 2: "CANCELLED"}
    assert not slurm.task_files(tmp_path, job, 2).status.exists()


def test_sacct_agrees_where_the_cluster_has_accounting(cluster: str, tmp_path: Path) -> None:
    """With accounting (slurmdbd), sacct's rows are those of scontrol."""
    probe = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True,
                           check=False)
    if probe.returncode != 0:
        pytest.skip(f"no accounting on this session's cluster ({probe.stderr.strip()}): "
                    "the tests ran with ABBENCH_SLURM_ACCOUNTING=0")
    job = slurm.submit_array(output_dir=tmp_path, exclusive=False,
                             commands=[["true"], ["false"]])
    assert slurm.wait(job, n_tasks=2, poll_s=0.5, timeout_s=120) == {
        0: "COMPLETED", 1: "FAILED"}
    deadline = time.monotonic() + 30  # slurmdbd gets the end of a job a moment later
    while True:
        rows = subprocess.run(["sacct", "-n", "-P", "-X", "-j", job, "-o",
                               "JobID,State,ExitCode"], capture_output=True, text=True,
                              check=True).stdout
        if slurm.parse_sacct(rows, job) == {0: "COMPLETED", 1: "FAILED"}:
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)
