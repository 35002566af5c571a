"""scripts/remote.sh run/logs/status/attach/stop/pull against a real sshd on 127.0.0.1.

The real checkout is synced to a throwaway remote directory and set up there (uv installed by pip
from a local wheelhouse, `uv sync --locked` offline from this machine's cache), then the smoke config
trains a tiny model for a few steps inside tmux on the "server".
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import remote_fixtures as rf

pytestmark = pytest.mark.slow  # two real training runs on the "server"

CONFIG = "configs/runs/smoke-cpu.yaml"
# A model and batch small enough that a step takes milliseconds on a shared 2-core machine.
TINY = [
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.n_kv_heads=2",
    "model.ffn_hidden=64",
    "hardware.micro_batch_size=4",
    "train.global_batch_size=4",
    "train.warmup_steps=1",
    "train.decay_steps=1",
    "train.log_every=1",
    "data.eval_batches=1",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[rf.SshServer]:
    if not (rf.REPO / CONFIG).exists():
        pytest.fail(f"{CONFIG} is missing: the remote run tests need the smoke config")
    root = tmp_path_factory.mktemp("sshd-run")
    wheelhouse = rf.build_uv_wheel(root / "wheelhouse").parent
    try:
        srv = rf.start_sshd(root / "server", wheelhouse=wheelhouse)
    except rf.SshdUnavailable as exc:
        pytest.skip(f"no OpenSSH server for the remote.sh tests: {exc}")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def remote(server: rf.SshServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(env file, remote directory) of a synced and set-up copy of this checkout."""
    base = tmp_path_factory.mktemp("remote-run")
    remote_dir = base / "enlace"
    env = server.write_env(base / "env", remote_dir, ENLACE_REMOTE_STOP_TIMEOUT="120")
    sync = rf.remote_sh(env, "sync")
    assert sync.returncode == 0, sync.stderr
    setup = rf.remote_sh(env, "setup", timeout=300)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    return env, remote_dir


MAX_STEPS = 12
# The run that `stop` ends: one job on two processes under torchrun (gloo on CPU), as on a
# multi-GPU server; micro-batch 2 x 2 ranks = the global batch of 4.
STOP_RUN = [
    "run", "--nproc", "2", CONFIG, "run.name=remote-stop", "train.max_steps=100000",
    "train.eval_every=100000", "train.checkpoint_every=100000",
    *[o if o != "hardware.micro_batch_size=4" else "hardware.micro_batch_size=2" for o in TINY],
]  # fmt: skip


@pytest.fixture(scope="module")
def started(
    remote: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    """Both training runs, started at once so that their slow start-ups (torch) overlap:
    remote-done (MAX_STEPS steps, into a hostile out_dir) and remote-stop (runs until stopped).
    Returns (marker file that must never appear, remote-done's out_dir)."""
    env, remote_dir = remote
    marker = tmp_path_factory.mktemp("marker") / "pwned"
    # Spaces, both quotes, a semicolon, $(...) and backticks: valid as a path, never a command.
    out_dir = f"runs/remote done 'q' \"d\"; touch {marker}; $(touch {marker}) `touch {marker}`"
    # Developers edit this checkout while the tests run: sync right before each start, since
    # `run` refuses a server whose configs/ differs from ours (tested below).
    assert rf.remote_sh(env, "sync").returncode == 0
    stop_run = rf.remote_sh(env, *STOP_RUN)
    assert stop_run.returncode == 0, stop_run.stdout + stop_run.stderr
    assert rf.remote_sh(env, "sync").returncode == 0
    done_run = rf.remote_sh(
        env, "run", CONFIG, "run.name=remote-done", f"run.out_dir={out_dir}",
        f"train.max_steps={MAX_STEPS}", "train.eval_every=1000", "train.checkpoint_every=1000",
        *TINY,
    )  # fmt: skip
    assert done_run.returncode == 0, done_run.stdout + done_run.stderr
    assert "run: started remote-done in tmux session remote-done" in done_run.stdout
    assert (remote_dir / out_dir).is_dir(), "out_dir must reach the server as one literal path"
    return marker, out_dir


def metrics_steps(path: Path) -> list[int]:
    import json

    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if isinstance(record.get("step"), int) and "loss" in record:
            steps.append(record["step"])
    return steps


def wait_for(predicate, what: str, timeout: float = 180) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_run_survives_a_killed_client_and_hostile_values_stay_data(
    server: rf.SshServer,
    remote: tuple[Path, Path],
    started: tuple[Path, str],
    tmp_path: Path,
) -> None:
    env, remote_dir = remote
    marker, out_dir = started
    max_steps = MAX_STEPS
    run_dir = remote_dir / out_dir

    # Follow the log, then kill the local ssh client mid-run (as a dropped connection would).
    follower = subprocess.Popen(
        ["bash", str(rf.REMOTE_SH), "logs", "remote-done"],
        env={**os.environ, "ENLACE_REMOTE_ENV": str(env)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        start_new_session=True, text=True,
    )  # fmt: skip
    assert follower.stdout is not None
    seen = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = follower.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("step 1/"):
            break
    assert any(line.startswith("step 1/") for line in seen), "".join(seen)
    os.killpg(follower.pid, signal.SIGKILL)
    follower.wait()
    steps_at_kill = metrics_steps(run_dir / "metrics.jsonl")
    assert not steps_at_kill or max(steps_at_kill) < max_steps, "the run ended before the kill"
    assert server.tmux("has-session", "-t", "=remote-done").returncode == 0

    # A new follower reconnects and is let be: it ends by itself when the run ends.
    follower = subprocess.Popen(
        ["bash", str(rf.REMOTE_SH), "logs", "remote-done", "-n", "1000"],
        env={**os.environ, "ENLACE_REMOTE_ENV": str(env)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        start_new_session=True, text=True,
    )  # fmt: skip
    try:
        followed, follow_err = follower.communicate(timeout=240)
    finally:
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGKILL)
    assert follower.returncode == 0, follow_err
    # (On an idle machine the run may already be over; then logs prints its end and says so.)
    assert "is running; Ctrl-C stops following" in follow_err or "is not running" in follow_err
    assert f"step {max_steps}/{max_steps}" in followed
    assert "enlace-train exited with code 0" in followed

    wait_for(
        lambda: (remote_dir / ".enlace-remote" / "remote-done.exit").exists(),
        "the run to finish inside tmux",
    )
    assert (remote_dir / ".enlace-remote" / "remote-done.exit").read_text().strip() == "0"
    assert max(metrics_steps(run_dir / "metrics.jsonl")) == max_steps
    console = (run_dir / "console.log").read_text()
    assert f"step {max_steps}/{max_steps}" in console
    assert "enlace-train exited with code 0" in console

    status = rf.remote_sh(env, "status")
    assert status.returncode == 0, status.stderr
    assert f"remote-done  finished (exit 0)  {out_dir}" in status.stdout
    assert f'"step": {max_steps}' in status.stdout  # the last metrics line

    logs = rf.remote_sh(env, "logs", "remote-done", "-n", "5")
    assert logs.returncode == 0, logs.stderr
    assert "enlace-train exited with code 0" in logs.stdout
    assert "is not running (exit code 0)" in logs.stderr

    pulled = tmp_path / "pulled"
    pull = rf.remote_sh(env, "pull", "remote-done", "--to", str(pulled), "--report")
    assert pull.returncode == 0, pull.stderr
    assert (pulled / "metrics.jsonl").read_bytes() == (run_dir / "metrics.jsonl").read_bytes()
    assert f"report: {pulled / 'report' / 'report.md'}" in pull.stdout
    assert (pulled / "report" / "loss.png").stat().st_size > 0
    assert not marker.exists()


def test_injection_in_run_name_or_override_only_fails_validation(
    server: rf.SshServer, remote: tuple[Path, Path], started: tuple[Path, str], tmp_path: Path
) -> None:
    env, remote_dir = remote
    marker = tmp_path / "pwned"
    for hostile in (
        f"run.name=x;touch {marker}",
        f"run.name=$(touch {marker})",
        f"run.name=`touch {marker}`",
        f"train.seed=1; touch {marker}",
    ):
        result = rf.remote_sh(env, "run", CONFIG, hostile, *TINY)
        assert result.returncode == 2, (hostile, result.stdout, result.stderr)
        assert "the config is not valid" in result.stderr and "nothing was sent" in result.stderr
    not_override = rf.remote_sh(env, "run", CONFIG, f"$(touch {marker})")
    assert not_override.returncode == 2
    assert "overrides are key=value" in not_override.stderr
    for verb in ("logs", "stop", "pull", "attach"):
        result = rf.remote_sh(env, verb, f"x;touch {marker}")
        assert result.returncode == 2, (verb, result.stderr)
    assert not marker.exists()
    states = {p.name for p in (remote_dir / ".enlace-remote").glob("*")}
    assert all(name.startswith(("remote-done.", "remote-stop.")) for name in states), states
    assert not list(remote_dir.glob("runs/x*"))


def test_run_refuses_when_the_remote_configs_are_stale(
    server: rf.SshServer, remote: tuple[Path, Path], started: tuple[Path, str]
) -> None:
    env, remote_dir = remote
    remote_config = remote_dir / CONFIG
    original = remote_config.read_text()
    remote_config.write_text(original + "# edited on the server\n")
    try:
        result = rf.remote_sh(env, "run", CONFIG, "run.name=remote-stale", *TINY)
    finally:
        remote_config.write_text(original)
    assert result.returncode == 1
    assert "configs/ on the remote differs from yours: run scripts/remote.sh sync first" in (
        result.stderr
    )
    assert not (remote_dir / ".enlace-remote" / "remote-stale.out_dir").exists()
    assert server.tmux("has-session", "-t", "=remote-stale").returncode != 0


def test_stop_checkpoints_and_pull_brings_back_a_loadable_model(
    server: rf.SshServer, remote: tuple[Path, Path], started: tuple[Path, str], tmp_path: Path
) -> None:
    env, remote_dir = remote
    run_dir = remote_dir / "runs" / "remote-stop"
    wait_for(lambda: len(metrics_steps(run_dir / "metrics.jsonl")) >= 2, "two training steps")

    assert rf.remote_sh(env, "sync").returncode == 0
    again = rf.remote_sh(env, *STOP_RUN)
    assert again.returncode == 1
    assert "run remote-stop is already running" in again.stderr

    status = rf.remote_sh(env, "status")
    assert "remote-stop  running (tmux session remote-stop)" in status.stdout, status.stdout
    assert '"step": ' in status.stdout.split("remote-stop  running")[1]

    attach_then_detach(env)
    assert server.tmux("has-session", "-t", "=remote-stop").returncode == 0

    stop = rf.remote_sh(env, "stop", "remote-stop")
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert "sent SIGTERM to process group" in stop.stdout
    assert "latest complete checkpoint: checkpoints/step_" in stop.stdout
    assert server.tmux("has-session", "-t", "=remote-stop").returncode != 0
    ckpt = stop.stdout.rsplit("latest complete checkpoint: ", 1)[1].strip()
    step = int(ckpt.removeprefix("checkpoints/step_"))
    assert 2 <= step < 100000
    assert (run_dir / ckpt / "COMPLETE").exists()
    console = (run_dir / "console.log").read_text()
    assert "start: uv run torchrun --standalone --nproc-per-node 2 -m enlace_train" in console
    assert f"stopped after step {step}" in console  # both ranks agreed on this step
    assert "torchrun exited with code" in console

    status = rf.remote_sh(env, "status")
    assert "remote-stop  stopped (exit " in status.stdout, status.stdout
    stopped_again = rf.remote_sh(env, "stop", "remote-stop")
    assert stopped_again.returncode == 1
    assert "run remote-stop is not running" in stopped_again.stderr

    pulled = tmp_path / "pulled"
    pull = rf.remote_sh(env, "pull", "remote-stop", "--to", str(pulled))
    assert pull.returncode == 0, pull.stderr
    assert f"{ckpt} (latest complete checkpoint)" in pull.stdout
    for name in ("metrics.jsonl", "config.yaml", "console.log", f"{ckpt}/COMPLETE"):
        assert (pulled / name).exists(), name
    again = rf.remote_sh(env, "pull", "remote-stop", "--to", str(pulled))
    assert again.returncode == 0, again.stderr

    from enlace_model.checkpoint import find_latest_checkpoint, load_model

    assert find_latest_checkpoint(pulled) == pulled / ckpt
    model = load_model(pulled)
    assert sum(p.numel() for p in model.parameters()) > 0


def attach_then_detach(env: Path) -> None:
    """`attach` in a pseudo-terminal: tmux draws the pane, Ctrl-b d detaches, the run goes on."""
    pid, fd = pty.fork()
    if pid == 0:  # child: the terminal's side
        os.environ["ENLACE_REMOTE_ENV"] = str(env)
        os.environ["TERM"] = "xterm"
        os.environ.pop("TMUX", None)
        os.execvp("bash", ["bash", str(rf.REMOTE_SH), "attach", "remote-stop"])
    screen = b""
    last_sent = 0.0
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the terminal's other side is gone
                    break
                if not chunk:
                    break
                screen += chunk
            # The tmux client takes the terminal (alternate screen) and may drop typeahead: once
            # the pane's text is on the screen, send Ctrl-b d, again each second until it acts.
            drawn = b"\x1b[?1049h" in screen and b"step " in screen.split(b"\x1b[?1049h", 1)[1]
            if drawn and time.monotonic() - last_sent > 1.0:
                os.write(fd, b"\x02d")
                last_sent = time.monotonic()
    finally:
        status = None
        for _ in range(25):
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status = code
                break
            time.sleep(0.2)
        os.close(fd)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    text = screen.decode(errors="replace")[-2000:]
    assert status is not None, f"attach did not detach: {text}"
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert b"[detached (from session remote-stop)]" in screen, text


def test_an_ended_run_whose_session_lingers_is_not_running(
    server: rf.SshServer, remote: tuple[Path, Path]
) -> None:
    """The exit file, not the tmux session, says a run ended: tmux can keep an ended pane's
    session for minutes (its process unreaped while other runs share the server), and a `logs`
    follower keyed on that session or pane never ended (seen in CI)."""
    env, remote_dir = remote
    state = remote_dir / ".enlace-remote"
    state.mkdir(exist_ok=True)
    (state / "remote-linger.out_dir").write_text("runs/linger\n")
    (remote_dir / "runs/linger").mkdir(parents=True, exist_ok=True)
    (remote_dir / "runs/linger/console.log").write_text("step 3/3 | loss 1.0\nthe last line\n")
    (state / "remote-linger.exit").write_text("0\n")
    assert server.tmux("new-session", "-d", "-s", "remote-linger", "sleep 600").returncode == 0
    try:
        logs = rf.remote_sh(env, "logs", "remote-linger", timeout=30)
        assert logs.returncode == 0, logs.stderr
        assert "the last line" in logs.stdout
        assert "run remote-linger is not running (exit code 0)" in logs.stderr
        status = rf.remote_sh(env, "status")
        assert "remote-linger  finished (exit 0)  runs/linger" in status.stdout, status.stdout
    finally:
        server.tmux("kill-session", "-t", "=remote-linger")
