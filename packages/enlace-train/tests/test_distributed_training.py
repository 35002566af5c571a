"""The trainer under torchrun: 2 CPU processes with gloo, through the real entry point.

Each 2-rank run is one `torchrun --standalone --nproc-per-node 2` of `python -m enlace_train`
(observed by tests/distributed_launch.py, which records file writes and the data windows each
rank reads). The single-process reference runs in this process. Tiny model, 10 float32 steps,
one CPU thread per rank.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not available",
)

LAUNCH = Path(__file__).with_name("distributed_launch.py")
STEPS = 10
RUN: dict[str, Any] = {
    "hardware": {
        "name": "cpu-test",
        "device": "cpu",
        "dtype": "float32",
        "micro_batch_size": 2,
        "num_threads": 1,
    },
    "model": {
        "vocab_size": 256,
        "context_length": 16,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "ffn_hidden": 64,
    },
    # global batch 4 = 2 ranks x micro-batch 2, or 1 process x 2 accumulated micro-batches of 2
    "train": {
        "seed": 11,
        "max_steps": STEPS,
        "global_batch_size": 4,
        "lr": 3e-3,
        "min_lr": 3e-4,
        "warmup_steps": 2,
        "decay_steps": 4,
        "log_every": 1,
        "eval_every": 5,
        "checkpoint_every": 5,
        "keep_checkpoints": 3,
        "grad_clip": 1.0,
    },
    "data": {
        "kind": "bytes",
        "path": "no-such-dir",
        "fallback": "builtin",
        "context_length": 16,
        "eval_batches": 2,
    },
}
DETERMINISTIC = ("step", "loss", "z_loss", "lr", "grad_norm", "val_loss", "val_bpb", "tokens_seen")


def write_run(root: Path, name: str, out: str | None = None, **train: Any) -> Path:
    """A run file for run `name` writing to runs/<out or name>."""
    cfg = json.loads(json.dumps(RUN))
    cfg["train"].update(train)
    cfg["run"] = {"name": name, "out_dir": str(root / "runs" / (out or name))}
    cfg["data"]["path"] = str(root / "no-such-dir")  # the built-in books, whatever the cwd
    path = root / f"{out or name}.yaml"
    path.write_text(json.dumps(cfg, indent=1), encoding="utf-8")  # JSON is YAML
    return path


def env_for(audit: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", ENLACE_TEST_AUDIT_DIR=str(audit))
    return env


def torchrun_args(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        *args,
    ]


def launch(run_file: Path, audit: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    """One 2-rank run through the observing launcher; fails the test on a non-zero exit."""
    audit.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        torchrun_args(str(LAUNCH), str(run_file), *overrides),
        cwd=run_file.parent,
        env=env_for(audit),
        capture_output=True,
        text=True,
        timeout=300,
    )
    (audit / "output.txt").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def curve(run_dir: Path, key: str = "loss") -> dict[int, float]:
    return {r["step"]: r[key] for r in rows(run_dir) if key in r}


def deterministic(run_dir: Path) -> list[dict[str, Any]]:
    return [{k: r[k] for k in DETERMINISTIC if k in r} for r in rows(run_dir)]


def audit_of(audit: Path, rank: int) -> dict[str, Any]:
    return json.loads((audit / f"rank_{rank}.json").read_text())


def single_process_train(run_file: Path) -> None:
    from enlace_config import load_run_config
    from enlace_train.trainer import train

    train(load_run_config(run_file))


def resume_from_step(src: Path, dst: Path, step: int) -> None:
    """A copy of a finished run directory as a crash right after checkpoint `step` leaves it."""
    shutil.copytree(src, dst)
    for ckpt in (dst / "checkpoints").glob("step_*"):  # not best/: a crash leaves it as it was
        if int(ckpt.name.removeprefix("step_")) > step:
            shutil.rmtree(ckpt)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dist")


@pytest.fixture(scope="module")
def reference(work: Path) -> Path:
    """1 process, micro-batch 2, accumulation 2: the curve the 2-rank runs must reproduce."""
    run_file = write_run(work, "single")
    single_process_train(run_file)
    return work / "runs" / "single"


@pytest.fixture(scope="module")
def ddp(work: Path) -> Path:
    launch(write_run(work, "ddp", parallelism="ddp"), work / "audit-ddp")
    return work / "runs" / "ddp"


@pytest.fixture(scope="module")
def fsdp(work: Path) -> Path:
    launch(write_run(work, "fsdp", parallelism="fsdp"), work / "audit-fsdp")
    return work / "runs" / "fsdp"


def assert_same_curve(got: dict[int, float], want: dict[int, float], rel: float) -> None:
    assert sorted(got) == sorted(want) == list(range(1, STEPS + 1))
    for step in want:
        assert abs(got[step] - want[step]) <= rel * abs(want[step]), (step, got[step], want[step])


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_two_ranks_match_one_process_with_accumulation(
    parallelism: str, reference: Path, request: pytest.FixtureRequest
) -> None:
    run = request.getfixturevalue(parallelism)
    for key in ("loss", "grad_norm"):
        assert_same_curve(curve(run, key), curve(reference, key), rel=1e-5)
    # the learning curve is a real one: the loss falls
    losses = curve(run)
    assert losses[STEPS] < losses[1]


def test_each_rank_reads_its_own_share_of_the_data(work: Path, ddp: Path) -> None:
    seen = {rank: audit_of(work / "audit-ddp", rank)["windows"] for rank in (0, 1)}
    assert len(seen[0]) == len(seen[1]) == STEPS  # one micro-batch per step on each rank
    for step, (a, b) in enumerate(zip(seen[0], seen[1], strict=True)):
        assert not set(a["windows"]) & set(b["windows"]), step
        # together the two ranks read the global stream's next 4 samples, as 1 process with
        # accumulation 2 does: rank 0 the first 2, rank 1 the next 2
        assert a["positions"] + b["positions"] == list(range(4 * step, 4 * step + 4))
    all_windows = [w for r in (0, 1) for batch in seen[r] for w in batch["windows"]]
    assert len(set(all_windows)) == len(all_windows)


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_only_rank_zero_writes_files(
    parallelism: str, work: Path, request: pytest.FixtureRequest
) -> None:
    run: Path = request.getfixturevalue(parallelism)
    writes = audit_of(work / f"audit-{parallelism}", 1)["writes"]
    inside = [w for w in writes if any(str(work) in p for p in w[1:])]
    if parallelism == "ddp":
        assert inside == []
    else:  # FSDP: each rank writes its own shard of model and optimizer, and nothing else
        shard_files = [w for w in inside if w[0] == "open"]
        assert shard_files and all(p.endswith("/distcp/__1_0.distcp") for _, p in shard_files)
        assert {w[0] for w in inside} <= {"open", "os.mkdir"}
        assert all(p.endswith("/distcp") for e, p in inside if e == "os.mkdir")
    # rank 0 wrote the whole run directory
    assert {p.name for p in run.iterdir()} >= {"metrics.jsonl", "config.yaml", "train.log"}
    assert audit_of(work / f"audit-{parallelism}", 0)["writes"]


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_stop_and_resume_reproduce_the_uninterrupted_run(
    parallelism: str, work: Path, request: pytest.FixtureRequest
) -> None:
    from enlace_model.checkpoint import load_state_dict

    full: Path = request.getfixturevalue(parallelism)
    resumed = work / "runs" / f"{parallelism}-resumed"
    resume_from_step(full, resumed, 5)  # as a crash right after the step-5 checkpoint leaves it
    launch(
        write_run(work, parallelism, f"{parallelism}-resumed", parallelism=parallelism),
        work / f"audit-{parallelism}-resumed",
    )
    assert "resuming" in (resumed / "train.log").read_text()
    assert deterministic(resumed) == deterministic(full)  # exactly, rows 1-5 kept, 6-10 rerun
    a = load_state_dict(full / "checkpoints" / f"step_{STEPS}")
    b = load_state_dict(resumed / "checkpoints" / f"step_{STEPS}")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoints_keep_the_single_process_layout(ddp: Path, fsdp: Path, reference: Path) -> None:
    from enlace_model import load_model

    ref = load_model(reference / "checkpoints" / f"step_{STEPS}").state_dict()
    for run in (ddp, fsdp):
        ckpt = run / "checkpoints" / f"step_{STEPS}"
        state = torch.load(ckpt / "trainer_state.pt", map_location="cpu", weights_only=True)
        assert state["world_size"] == 2 and len(state["rank_states"]) == 2
        assert [s["loader"]["samples_consumed"] for s in state["rank_states"]] == [4 * STEPS] * 2
        # the consolidated model.safetensors reads like any other checkpoint (and exports)
        got = load_model(ckpt).state_dict()
        assert got.keys() == ref.keys()
        for k in ref:
            torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-5)
    assert (fsdp / "checkpoints" / f"step_{STEPS}" / "distcp" / ".metadata").is_file()
    assert not (ddp / "checkpoints" / f"step_{STEPS}" / "distcp").exists()


def test_resume_at_another_world_size_is_supported_and_says_so(work: Path, fsdp: Path) -> None:
    """2 FSDP ranks -> 1 process: shards re-assembled, data re-split, a warning that it is not exact."""
    moved = work / "runs" / "fsdp-to-one"
    resume_from_step(fsdp, moved, 5)
    single_process_train(write_run(work, "fsdp", "fsdp-to-one", parallelism="fsdp"))
    log = (moved / "train.log").read_text()
    assert "from a checkpoint written by 2" in log and "no longer bit-exact" in log
    assert_same_curve(curve(moved), curve(fsdp), rel=1e-5)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def _rank_of(pid: int) -> int | None:
    try:
        env = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return None
    ranks = [int(v.split(b"=", 1)[1]) for v in env if v.startswith(b"RANK=")]
    return ranks[0] if ranks else None


class LongRun:
    """A 2-rank `torchrun -m enlace_train` that would run for hours: stopped by the test."""

    def __init__(self, work: Path, name: str) -> None:
        self.work, self.name = work, name
        self.run_file = write_run(
            work,
            name,
            max_steps=100_000,
            checkpoint_every=100_000,
            eval_every=100_000,
            decay_steps=0,
        )
        self.run_dir = work / "runs" / name
        self.output = work / f"{name}.out"

    def start(self) -> subprocess.Popen[bytes]:
        with self.output.open("a") as out:
            return subprocess.Popen(
                torchrun_args("-m", "enlace_train", str(self.run_file)),
                cwd=self.work,
                env=env_for(self.work),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def wait_for_step(self, proc: subprocess.Popen[bytes], step: int) -> None:
        deadline = time.monotonic() + 240
        while not any(r.get("step", 0) >= step for r in self.rows()):
            assert proc.poll() is None, self.output.read_text()[-3000:]
            assert time.monotonic() < deadline, "the 2-rank run never got there"
            time.sleep(0.2)

    def rows(self) -> list[dict[str, Any]]:
        metrics = self.run_dir / "metrics.jsonl"
        text = metrics.read_text() if metrics.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the ranks")
def test_signal_stop_resume_and_a_killed_rank(work: Path) -> None:
    """SIGTERM to torchrun: every rank stops after the same step with one checkpoint. Rerun: it
    resumes there. SIGKILL one rank: the job ends (torchrun tears the other down), no hang."""
    job = LongRun(work, "stopped")
    proc = job.start()
    try:
        job.wait_for_step(proc, 3)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    (checkpoint,) = (job.run_dir / "checkpoints").glob("step_*")
    step = int(checkpoint.name.removeprefix("step_"))
    log = (job.run_dir / "train.log").read_text()
    assert "SIGTERM" in log and f"stopped after step {step}" in log
    state = torch.load(checkpoint / "trainer_state.pt", map_location="cpu", weights_only=True)
    assert state["step"] == step == job.rows()[-1]["step"]
    consumed = [s["loader"]["samples_consumed"] for s in state["rank_states"]]
    assert consumed == [4 * step, 4 * step]  # both ranks stopped after the same step

    proc = job.start()  # the same command again: resumes from that checkpoint
    try:
        job.wait_for_step(proc, step + 3)
        workers = {_rank_of(p): p for p in _children(proc.pid)}
        assert set(workers) == {0, 1}, workers
        os.kill(workers[1], signal.SIGKILL)
        code = proc.wait(timeout=120)  # a hang fails here instead of blocking the suite
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code != 0
    assert not Path(f"/proc/{workers[0]}").exists() or _rank_of(workers[0]) is None
    assert "exitcode  : -9" in job.output.read_text()  # torchrun's failure report names it
    steps = [r["step"] for r in job.rows() if "loss" in r]
    assert steps == list(range(1, len(steps) + 1))  # resumed at step + 1, no step twice
    assert f"from {checkpoint}" in (job.run_dir / "train.log").read_text()
