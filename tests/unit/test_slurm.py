"""abbench.campaign.slurm without a cluster: parsing captured Slurm output (see
slurm_output/README.md), the merge of the sources in task_states (fake Slurm commands
on PATH that print captured output), the job's wrapper script, and wait's rules."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from abbench.campaign import slurm
from abbench.errors import AbbenchError, SchedulerError
from tests.faultkit import wait_for

OUT = Path(__file__).parent / "slurm_output"


def text(name: str) -> str:
    return (OUT / name).read_text()


# --- parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "ids"), [
    ("3", [3]), ("4-5%2", [4, 5]), ("[4-5%2]", [4, 5]), ("1,3,8-12:2", [1, 3, 8, 10, 12]),
    ("N/A", []), ("", []),
])
def test_task_ids(spec: str, ids: list[int]) -> None:
    assert slurm.parse_task_ids(spec) == ids


def test_task_ids_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a Slurm array index range"):
        slurm.parse_task_ids("4-x")


def test_squeue_one_line_per_task_or_a_pending_range() -> None:
    mid = {2: "RUNNING", 3: "RUNNING", 4: "PENDING", 5: "PENDING"}
    assert slurm.parse_squeue(text("15-squeue_r.txt")) == mid
    assert slurm.parse_squeue(text("15-squeue_norange.txt")) == mid  # "4-5%2 PENDING"
    assert slurm.parse_squeue(text("15-squeue_r_after.txt")) == {3: "RUNNING", 5: "RUNNING"}
    assert slurm.parse_squeue("") == {}


def test_scontrol_records_of_the_array() -> None:
    assert slurm.parse_scontrol(text("15-scontrol_mid.txt"), "15") == {
        0: "COMPLETED", 1: "FAILED", 2: "RUNNING", 3: "RUNNING", 4: "PENDING", 5: "PENDING"}
    # scancel of a pending task: it has no record any more (and 5 now runs in the
    # array's own record, JobId=15)
    assert slurm.parse_scontrol(text("15-scontrol_after.txt"), "15") == {
        0: "COMPLETED", 1: "FAILED", 2: "CANCELLED", 3: "RUNNING", 5: "RUNNING"}
    assert slurm.parse_scontrol(text("7-scontrol_timeout.txt"), "7") == {
        0: "TIMEOUT", 1: "TIMEOUT", 2: "CANCELLED"}
    assert slurm.parse_scontrol(text("7-scontrol_timeout.txt"), "17") == {}


def test_sacct_rows_of_the_array() -> None:
    assert slurm.parse_sacct(text("98-sacct_mid.txt"), "98") == {
        0: "COMPLETED", 1: "FAILED", 2: "RUNNING", 3: "RUNNING", 4: "PENDING", 5: "PENDING"}
    # "CANCELLED by 0"; task 4, cancelled while pending, has no row
    assert slurm.parse_sacct(text("98-sacct_after.txt"), "98") == {
        0: "COMPLETED", 1: "FAILED", 2: "CANCELLED", 3: "RUNNING", 5: "RUNNING"}
    assert slurm.parse_sacct(text("98-sacct_end.txt"), "98") == {
        0: "COMPLETED", 1: "FAILED", 2: "CANCELLED", 3: "COMPLETED", 5: "COMPLETED"}
    assert slurm.parse_sacct(text("103-sacct_timeout.txt"), "103") == {
        0: "TIMEOUT", 1: "TIMEOUT"}
    assert slurm.parse_sacct(text("98-sacct_end.txt"), "9") == {}  # not 98's rows


@pytest.mark.parametrize(("body", "state"), [
    ("exit 0\n", "COMPLETED"), ("exit 3\n", "FAILED"), ("signal TERM 143\n", "CANCELLED"),
    ("running vm 123 1700000000\n", None), ("", None),
])
def test_status_file(body: str, state: str | None) -> None:
    assert slurm.parse_status_file(body) == state


def test_cancel_file() -> None:
    assert slurm.parse_cancel_file("4\n2\n") == (False, {2, 4})
    assert slurm.parse_cancel_file("1\nall\n") == (True, {1})


# --- task_states over fake Slurm commands ----------------------------------------------


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``fake(name, stdout, stderr, rc)`` puts a command on an otherwise empty PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))

    def fake(name: str, stdout: str = "", stderr: str = "", rc: int = 0) -> None:
        (bin_dir / f"{name}.out").write_text(stdout)
        (bin_dir / f"{name}.err").write_text(stderr)
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "$@" >>{bin_dir}/{name}.calls\n'
                          f"/bin/cat {bin_dir}/{name}.out\n/bin/cat {bin_dir}/{name}.err >&2\n"
                          f"exit {rc}\n")
        script.chmod(0o755)

    def calls(name: str) -> list[str]:
        path = bin_dir / f"{name}.calls"
        return path.read_text().splitlines() if path.exists() else []

    fake.calls = calls  # type: ignore[attr-defined]
    return fake


def no_accounting(fake) -> None:
    fake("sacct", stderr=text("sacct_disabled.txt"), rc=1)


def test_states_live_tasks_need_no_other_source(fake_bin) -> None:
    fake_bin("squeue", text("15-squeue_r.txt"))
    fake_bin("scontrol", text("15-scontrol_mid.txt"))
    no_accounting(fake_bin)
    assert slurm.task_states("15", n_tasks=6) == {
        0: "COMPLETED", 1: "FAILED", 2: "RUNNING", 3: "RUNNING", 4: "PENDING", 5: "PENDING"}
    assert fake_bin.calls("squeue") == ["-h -r -j 15 -o %K %T"]
    assert fake_bin.calls("sacct") == []  # scontrol knew every task squeue did not list


def test_states_pending_task_cancelled(fake_bin, tmp_path: Path) -> None:
    fake_bin("squeue", text("15-squeue_r_after.txt"))
    fake_bin("scontrol", text("15-scontrol_after.txt"))
    no_accounting(fake_bin)
    states = slurm.task_states("15", n_tasks=6, output_dir=tmp_path)
    assert states == {0: "COMPLETED", 1: "FAILED", 2: "CANCELLED", 3: "RUNNING",
                      4: "UNKNOWN", 5: "RUNNING"}
    (tmp_path / "15.cancel").write_text("2\n4\n")  # what slurm.cancel(output_dir=) notes
    assert slurm.task_states("15", n_tasks=6, output_dir=tmp_path)[4] == "CANCELLED"


def test_states_without_n_tasks_lists_what_is_known(fake_bin) -> None:
    fake_bin("squeue", text("15-squeue_r_after.txt"))
    fake_bin("scontrol", text("15-scontrol_after.txt"))
    no_accounting(fake_bin)
    assert sorted(slurm.task_states("15")) == [0, 1, 2, 3, 5]


def test_states_of_a_forgotten_job_come_from_the_status_files(fake_bin, tmp_path: Path) -> None:
    fake_bin("squeue", stderr=text("squeue_gone.txt"), rc=1)
    fake_bin("scontrol", stderr=text("squeue_gone.txt"), rc=1)
    no_accounting(fake_bin)
    (tmp_path / "15_0.status").write_text("exit 0\n")
    (tmp_path / "15_1.status").write_text("exit 3\n")
    (tmp_path / "15_2.status").write_text("signal TERM 143\n")
    (tmp_path / "15_3.status").write_text("running vm 1 2\n")  # killed before it said more
    (tmp_path / "150_4.status").write_text("exit 0\n")  # another job
    assert slurm.task_states("15", n_tasks=5, output_dir=tmp_path) == {
        0: "COMPLETED", 1: "FAILED", 2: "CANCELLED", 3: "UNKNOWN", 4: "UNKNOWN"}
    (tmp_path / "15.cancel").write_text("all\n")
    assert slurm.task_states("15", n_tasks=5, output_dir=tmp_path) == {
        0: "COMPLETED", 1: "FAILED", 2: "CANCELLED", 3: "CANCELLED", 4: "CANCELLED"}


def test_states_accounting_beats_the_status_file(fake_bin, tmp_path: Path) -> None:
    fake_bin("squeue", stderr=text("squeue_gone.txt"), rc=1)
    fake_bin("scontrol", stderr=text("squeue_gone.txt"), rc=1)
    fake_bin("sacct", text("103-sacct_timeout.txt"))
    (tmp_path / "103_0.status").write_text("signal TERM 143\n")
    states = slurm.task_states("103", n_tasks=2, output_dir=tmp_path)
    assert states == {0: "TIMEOUT", 1: "TIMEOUT"}  # sacct says why the SIGTERM came


def test_states_pending_cancel_with_accounting(fake_bin, tmp_path: Path) -> None:
    fake_bin("squeue", stderr=text("squeue_gone.txt"), rc=1)
    fake_bin("scontrol", stderr=text("squeue_gone.txt"), rc=1)
    fake_bin("sacct", text("98-sacct_end.txt"))
    assert slurm.task_states("98", n_tasks=6, output_dir=tmp_path)[4] == "UNKNOWN"
    (tmp_path / "98.cancel").write_text("2\n4\n")
    assert slurm.task_states("98", n_tasks=6, output_dir=tmp_path) == {
        0: "COMPLETED", 1: "FAILED", 2: "CANCELLED", 3: "COMPLETED", 4: "CANCELLED",
        5: "COMPLETED"}


def test_states_controller_down(fake_bin) -> None:
    fake_bin("squeue", stderr=text("squeue_down.txt"), rc=1)
    with pytest.raises(SchedulerError) as e:
        slurm.task_states("15", n_tasks=2)
    msg = str(e.value)
    assert "Unable to contact slurm controller" in msg
    assert "scripts/slurm-local.sh up" in msg
    assert isinstance(e.value, AbbenchError) and e.value.exit_code == 2


def test_no_slurm_on_path(fake_bin, tmp_path: Path) -> None:
    with pytest.raises(SchedulerError, match="sbatch not found") as e:
        slurm.submit_array(output_dir=tmp_path, commands=[["true"]])
    assert "load your cluster's Slurm module" in str(e.value)
    with pytest.raises(SchedulerError, match="squeue not found"):
        slurm.task_states("1")


def test_sbatch_refuses(fake_bin, tmp_path: Path) -> None:
    fake_bin("sbatch", stderr=text("sbatch_badpart.txt"), rc=1)
    with pytest.raises(SchedulerError, match="invalid partition specified: gpu") as e:
        slurm.submit_array(output_dir=tmp_path, commands=[["true"]], partition="gpu")
    assert "sinfo" in str(e.value)
    assert not list(tmp_path.glob("*.sbatch"))


def test_cancel(fake_bin, tmp_path: Path) -> None:
    fake_bin("scancel")
    slurm.cancel("15", 2, output_dir=tmp_path)
    slurm.cancel("15", [3, 4])
    slurm.cancel("15", output_dir=tmp_path)
    slurm.cancel("15", [])
    assert fake_bin.calls("scancel") == ["15_2", "15_3 15_4", "15"]
    assert (tmp_path / "15.cancel").read_text() == "2\nall\n"
    fake_bin("scancel", stderr="scancel: error: Kill job error on job id 15: Invalid job "
                               "id specified\n", rc=1)
    slurm.cancel("15")  # ended long ago: nothing to do
    fake_bin("scancel", stderr=text("squeue_down.txt"), rc=1)
    with pytest.raises(SchedulerError, match="scancel failed"):
        slurm.cancel("15")


# --- submit_array: the sbatch line and the wrapper script ------------------------------


@pytest.fixture
def submitted(fake_bin, tmp_path: Path):
    """Submit through a fake sbatch that answers job 42; returns (argv, script path)."""
    fake_bin("sbatch", "42;cluster1\n")

    def submit(**kw) -> tuple[list[str], Path]:
        out = tmp_path / "out"
        job = slurm.submit_array(output_dir=out, **kw)
        assert job == "42"
        argv = fake_bin.calls("sbatch")[-1].split(" ")
        assert argv[-1].startswith(str(out / ".submit-"))
        return argv[:-1], out / "42.sbatch"

    return submit


def test_sbatch_options(submitted, tmp_path: Path) -> None:
    argv, script = submitted(commands=[["true"], ["false"], ["true"]], partition="gpu",
                             gres="gpu:1", time="00:30:00", max_parallel=2, job_name="ab-1",
                             extra_args=["--account=perf"])
    out = tmp_path / "out"
    assert argv == ["--parsable", "--array=0-2%2", "--job-name=ab-1",
                    f"--output={out}/%A_%a.out", f"--error={out}/%A_%a.err",
                    "--partition=gpu", "--gres=gpu:1", "--time=00:30:00", "--exclusive",
                    "--account=perf"]
    assert script.read_text().startswith("#!/bin/bash\n")
    argv, _ = submitted(script="true", n_tasks=1, exclusive=False)
    assert "--exclusive" not in argv and "--array=0-0" in argv


def test_submit_rejects_bad_input(submitted) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        submitted()
    with pytest.raises(ValueError, match="n_tasks"):
        submitted(script="true")
    with pytest.raises(ValueError, match="2 commands"):
        submitted(commands=[["a"], ["b"]], n_tasks=3)
    with pytest.raises(ValueError, match="job_name"):
        submitted(commands=[["a"]], job_name="a b")
    with pytest.raises(ValueError, match="shell variable"):
        submitted(commands=[["a"]], env={"A-B": "1"})


def run_wrapper(script: Path, task: int, *, term_when: list[str] | None = None
                ) -> subprocess.CompletedProcess[str]:
    """Run the batch script as slurmd would, for one array task (no Slurm needed);
    ``term_when``: once a process of the task runs that argv, SIGTERM to the task's
    process group, as slurmstepd sends it."""
    env = {**os.environ, "PATH": "/usr/bin:/bin", "SLURM_ARRAY_JOB_ID": "42",
           "SLURM_ARRAY_TASK_ID": str(task)}
    if term_when is None:
        return subprocess.run(["/bin/bash", str(script)], env=env, capture_output=True,
                              text=True, timeout=120, check=False)
    p = subprocess.Popen(["/bin/bash", str(script)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)

    def running() -> bool:
        for child in psutil.Process(p.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.cmdline() == term_when:
                    return True
        return False

    wait_for(running, 120, f"the task to run {term_when}")
    os.killpg(p.pid, signal.SIGTERM)  # slurmstepd signals every process of the task
    stdout, stderr = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)


def test_wrapper_commands_env_and_status(submitted) -> None:
    _, script = submitted(commands=[["printf", "%s|", "a b", "$HOME", "it's"],
                                    ["sh", "-c", 'echo "$ABX" >&2; exit 3']],
                          env={"ABX": "x y'z $HOME"})
    done = run_wrapper(script, 0)
    assert (done.returncode, done.stdout) == (0, "a b|$HOME|it's|")
    assert (script.parent / "42_0.status").read_text() == "exit 0\n"
    failed = run_wrapper(script, 1)
    assert (failed.returncode, failed.stderr) == (3, "x y'z $HOME\n")
    assert (script.parent / "42_1.status").read_text() == "exit 3\n"
    missing = run_wrapper(script, 2)
    assert missing.returncode == 127 and "no command for array task 2" in missing.stderr


def test_wrapper_script_body_and_sigterm(submitted) -> None:
    _, script = submitted(script=['echo "task $SLURM_ARRAY_TASK_ID"',
                                  'if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then sleep 30; fi'],
                          n_tasks=2)
    assert run_wrapper(script, 0).stdout == "task 0\n"
    stopped = run_wrapper(script, 1, term_when=["sleep", "30"])
    assert stopped.returncode == 143  # stopped by the TERM: the sleep's end exits 0
    assert (script.parent / "42_1.status").read_text() == "signal TERM 143\n"


# --- wait --------------------------------------------------------------------------------


def scripted(monkeypatch: pytest.MonkeyPatch, answers: list[dict[int, str]]) -> list[int]:
    """task_states answers these in turn (the last one forever); returns the poll count."""
    polls = [0]

    def fake(job_id: str, *, n_tasks=None, output_dir=None) -> dict[int, str]:
        polls[0] += 1
        return dict(answers[min(polls[0], len(answers)) - 1])

    monkeypatch.setattr(slurm, "task_states", fake)
    return polls


def test_wait_reports_changes_until_all_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, [{0: "PENDING", 1: "PENDING"}, {0: "RUNNING", 1: "PENDING"},
                           {0: "RUNNING", 1: "PENDING"}, {0: "COMPLETED", 1: "RUNNING"},
                           {0: "COMPLETED", 1: "FAILED"}])
    seen: list[dict[int, str]] = []
    final = slurm.wait("9", n_tasks=2, on_progress=seen.append, poll_s=0)
    assert final == {0: "COMPLETED", 1: "FAILED"}
    assert len(seen) == 4  # the repeated answer is not reported twice
    assert slurm.count_states(final) == "1 COMPLETED, 1 FAILED"


def test_wait_takes_unknown_only_twice_in_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    polls = scripted(monkeypatch, [{0: "COMPLETED", 1: "UNKNOWN"}, {0: "COMPLETED", 1: "RUNNING"},
                                   {0: "COMPLETED", 1: "UNKNOWN"}])
    assert slurm.wait("9", n_tasks=2, poll_s=0) == {0: "COMPLETED", 1: "UNKNOWN"}
    assert polls[0] == 4


def test_wait_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, [{0: "RUNNING", 1: "PENDING"}])
    with pytest.raises(SchedulerError, match=r"not done after 0.2 s: 1 RUNNING, 1 PENDING") as e:
        slurm.wait("9", poll_s=0.05, timeout_s=0.2)
    assert "scancel 9" in str(e.value)


def test_wait_for_a_job_nobody_knows(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, [{}])
    with pytest.raises(SchedulerError, match="unknown to squeue, scontrol and sacct"):
        slurm.wait("9", poll_s=0)


def test_abbench_cancel_stops_every_job_of_a_campaign(fake_bin, tmp_path: Path) -> None:
    """``abbench cancel CAMPAIGN``: scancel for each job the campaign submitted, each
    noted in its <job>.cancel (a pending task then reads CANCELLED, not UNKNOWN)."""
    from typer.testing import CliRunner

    from abbench.campaign.gather import CAMPAIGN_FILE, SCHEMA_VERSION
    from abbench.cli import app

    folder = tmp_path / "camp"
    (folder / "slurm").mkdir(parents=True)
    (folder / CAMPAIGN_FILE).write_text(json.dumps({
        "schema": SCHEMA_VERSION, "id": "camp",
        "submissions": [{"job": "15", "tasks": {"0": 0, "1": 1}},
                        {"job": "17", "tasks": {"0": 1}}]}))
    fake_bin("scancel")
    res = CliRunner().invoke(app, ["cancel", str(folder), "--results", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert fake_bin.calls("scancel") == ["15", "17"]
    assert slurm.parse_cancel_file((folder / "slurm" / "15.cancel").read_text()) == (True, set())
    assert "cancelled Slurm job(s) 15, 17" in res.stdout
    res = CliRunner().invoke(app, ["cancel", str(tmp_path / "nothing"), "--results",
                                   str(tmp_path)])
    assert res.exit_code == 2 and "is not a campaign" in res.stderr
