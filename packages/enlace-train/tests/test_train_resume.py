"""Exact resumption on CPU: a run stopped by SIGTERM, or killed with -9 after a checkpoint, and then
resumed by re-running the same command writes the same metrics.jsonl losses and ends with the same
weights, bit for bit, as a run that never stopped; with gradient accumulation on (micro-batch 2,
global batch 4), in float32, in float16 with a GradScaler whose scale moves during the run, and in
bfloat16 autocast (the chat script's profile) on a CPU with bfloat16 instructions.

The interrupted runs are real subprocesses (`python -m enlace_train RUN.yaml`); the references and
the resumptions run in-process (same code, same single thread), which keeps the test fast."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from enlace_model.checkpoint import list_checkpoints, load_state_dict
from enlace_train.backends import cpu_bf16_in_silicon
from enlace_train.errors import ResumeError
from enlace_train.trainer import train

LONG = {
    "max_steps": 40,
    "warmup_steps": 4,
    "decay_steps": 10,
    "log_every": 1,
    "eval_every": 5,
    "checkpoint_every": 10,
}
LONG16 = {**LONG, "max_steps": 24, "decay_steps": 6, "checkpoint_every": 6}
FP16 = {
    "dtype": "float16",
    "loss_scaling": True,
    "grad_scaler_init_scale": 2.0**24,
    "grad_scaler_growth_interval": 3,
}


def rows_of(h, run_dir: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    rows = h.metrics_rows(run_dir)
    train_rows = [(r["step"], r["loss"]) for r in rows if "loss" in r]
    val_rows = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    return train_rows, val_rows


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    # cloned: safetensors may map the file, and a test below damages it afterwards
    return {k: v.clone() for k, v in load_state_dict(list_checkpoints(run_dir)[-1]).items()}


def assert_same_run(h, ref_dir: Path, run_dir: Path) -> None:
    ref_rows, run_rows = rows_of(h, ref_dir), rows_of(h, run_dir)
    assert run_rows[0] == ref_rows[0]  # every step once, same losses, bit for bit
    assert run_rows[1] == ref_rows[1]
    ref_w, run_w = final_weights(ref_dir), final_weights(run_dir)
    assert ref_w.keys() == run_w.keys()
    for key in ref_w:
        assert torch.equal(ref_w[key], run_w[key]), key


def wait_for(proc: subprocess.Popen[str], condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            pytest.fail(f"the run ended (rc {proc.returncode}) before {what}; lengthen it:\n{out}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


def logged_steps(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return path.read_text().count('"loss"') if path.exists() else 0


@pytest.fixture(scope="module")
def reference(tmp_path_factory, h):
    """The uninterrupted float32 run both interruption cases compare with (trained once)."""
    return train(h.load(h.make_run_file(tmp_path_factory.mktemp("reference"), "ref", train=LONG)))


def test_sigterm_then_rerun_is_bit_exact(write_run, h, reference):
    ref = reference
    path = write_run("cut", train=LONG)
    run_dir = h.run_dir_of(path)
    proc = h.cli(str(path))
    wait_for(proc, lambda: logged_steps(run_dir) >= 2, "the second logged step")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "SIGTERM received" in out
    stopped_at = int(list_checkpoints(run_dir)[-1].name.split("_")[1])
    assert 2 <= stopped_at < LONG["max_steps"]
    assert rows_of(h, run_dir)[0][-1][0] == stopped_at  # the step in flight finished, then saved

    resumed = train(h.load(path))  # the same command again
    assert resumed.step == LONG["max_steps"] and not resumed.stopped_by_signal
    assert_same_run(h, ref.run_dir, run_dir)


def test_kill_9_after_a_checkpoint_then_rerun_is_bit_exact(write_run, h, reference):
    ref = reference
    path = write_run("killed", train=LONG)
    run_dir = h.run_dir_of(path)
    proc = h.cli(str(path))
    wait_for(proc, lambda: logged_steps(run_dir) >= 13, "step 13 (past the step-10 checkpoint)")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert logged_steps(run_dir) >= 13  # rows past the checkpoint exist and must be cut back

    train(h.load(path))
    assert_same_run(h, ref.run_dir, run_dir)


def sigterm_at_step_4_then_resume(write_run, h, name: str, hardware: dict) -> tuple[Path, str]:
    """A LONG16 run stopped by SIGTERM after its fourth logged step, then resumed in-process: its
    run directory and what the interrupted process printed."""
    path = write_run(name, hardware=hardware, train=LONG16)
    run_dir = h.run_dir_of(path)
    proc = h.cli(str(path))
    wait_for(proc, lambda: logged_steps(run_dir) >= 4, "step 4")
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert int(list_checkpoints(run_dir)[-1].name.split("_")[1]) < LONG16["max_steps"]
    train(h.load(path))
    return run_dir, out


def test_float16_grad_scaler_sigterm_resume_is_bit_exact(write_run, h):
    ref = train(h.load(write_run("ref16", hardware=FP16, train=LONG16)))
    rows = h.metrics_rows(ref.run_dir)
    scales = {r["loss_scale"] for r in rows if "loss_scale" in r}
    assert rows[-2]["skipped_steps"] > 0 and len(scales) > 2  # the scaler's state matters here

    run_dir, _ = sigterm_at_step_4_then_resume(write_run, h, "cut16", FP16)
    assert_same_run(h, ref.run_dir, run_dir)
    assert [r.get("loss_scale") for r in h.metrics_rows(run_dir)] == [
        r.get("loss_scale") for r in rows
    ]


@pytest.mark.skipif(
    not cpu_bf16_in_silicon(), reason="this CPU has no bfloat16 instructions (AVX512-BF16 or AMX)"
)
def test_bfloat16_autocast_sigterm_resume_is_bit_exact(write_run, h):
    bf16 = {"dtype": "bfloat16"}
    ref = train(h.load(write_run("ref-bf16", hardware=bf16, train=LONG16)))
    run_dir, out = sigterm_at_step_4_then_resume(write_run, h, "cut-bf16", bf16)
    assert "': bfloat16, attention" in out  # the start-up line: this run trained in bfloat16
    assert_same_run(h, ref.run_dir, run_dir)


def test_corrupt_newest_checkpoint_is_skipped_and_the_previous_one_used(write_run, h, caplog):
    path = write_run("corrupt")
    ref = train(h.load(path))
    ref_weights = final_weights(ref.run_dir)
    newest = list_checkpoints(ref.run_dir)[-1]
    assert newest.name == "step_12"
    blob = newest / "model.safetensors"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit of weights
    blob.write_bytes(bytes(data))
    incomplete = ref.run_dir / "checkpoints" / "step_16"  # a save killed before its COMPLETE marker
    incomplete.mkdir()
    (incomplete / "model.safetensors").write_bytes(b"partial")

    resumed = train(h.load(path, "train.max_steps=12"))
    log_text = (ref.run_dir / "train.log").read_text()
    assert "skipping checkpoint" in log_text and "step_12" in log_text and "step_16" in log_text
    assert "from " + str(ref.run_dir / "checkpoints" / "step_8") in log_text
    assert resumed.step == 12
    again = final_weights(ref.run_dir)
    assert all(torch.equal(again[k], ref_weights[k]) for k in ref_weights)


def test_changed_shape_is_refused_listing_every_change(write_run, h):
    path = write_run("shape", train={"max_steps": 4, "decay_steps": 2})
    train(h.load(path))
    with pytest.raises(ResumeError) as info:
        train(h.load(path, "model.d_model=64", "train.lr=0.01"))
    msg = str(info.value)
    assert "model.d_model: 32 -> 64" in msg and "train.lr: 0.003 -> 0.01" in msg
    assert "command line" in msg.lower() or "override" in msg.lower()
    assert "train.init_from" in msg


def test_allowed_changes_longer_run_and_intervals(write_run, h):
    path = write_run("longer", train={"max_steps": 8, "decay_steps": 2})
    train(h.load(path))
    with pytest.raises(ResumeError, match="may only grow"):
        train(h.load(path, "train.max_steps=6"))
    summary = train(
        h.load(
            path,
            "train.max_steps=10",
            "train.log_every=2",
            "train.eval_every=5",
            "train.checkpoint_every=5",
        )
    )
    assert summary.step == 10
    steps = [r["step"] for r in h.metrics_rows(summary.run_dir) if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6, 7, 8, 10]


def test_thread_count_change_refused_unless_forced(write_run, h):
    path = write_run("threads", train={"max_steps": 4, "decay_steps": 2})
    train(h.load(path))
    with pytest.raises(ResumeError, match=r"uses 2"):
        train(h.load(path, "train.max_steps=6", "hardware.num_threads=2"))
    summary = train(
        h.load(
            path, "train.max_steps=6", "hardware.num_threads=2", "train.allow_thread_change=true"
        )
    )
    assert summary.step == 6
    assert "no longer bit-exact" in (summary.run_dir / "train.log").read_text()


def test_the_openmp_spin_count_never_blocks_a_resume(tmp_path, h):
    """hardware.openmp_spin_count only decides how idle threads wait, no number of the run: a
    checkpoint written before the key existed, or with another value, resumes."""
    from enlace_train.checkpointing import check_resume_allowed

    now = h.load(h.make_run_file(tmp_path, "spin", hardware={"openmp_spin_count": 10000}))
    current = now.to_dict()
    before_the_key = {**current, "hardware": dict(current["hardware"])}
    del before_the_key["hardware"]["openmp_spin_count"]
    other_value = {**current, "hardware": {**current["hardware"], "openmp_spin_count": 0}}
    for saved in (before_the_key, other_value):
        allowed = check_resume_allowed(saved, current, now.origins, checkpoint=tmp_path, step=3)
        assert [line.split(":")[0] for line in allowed] == ["hardware.openmp_spin_count"]


def test_another_profile_name_resumes_but_not_another_dtype(tmp_path, h):
    """A run the chat script began on configs/hardware/cpu.yaml resumes on cpu-bf16.yaml with
    `--float32` (hardware.dtype=float32): the profile's name is a label; its dtype is arithmetic."""
    from enlace_train.checkpointing import check_resume_allowed

    now = h.load(h.make_run_file(tmp_path, "named", hardware={"name": "cpu-bf16"}))
    current = now.to_dict()
    saved = {**current, "hardware": {**current["hardware"], "name": "cpu"}}
    allowed = check_resume_allowed(saved, current, now.origins, checkpoint=tmp_path, step=3)
    assert [line.split(":")[0] for line in allowed] == ["hardware.name"]
    saved["hardware"]["dtype"] = "bfloat16"
    with pytest.raises(ResumeError, match=r"hardware\.dtype: 'bfloat16' -> 'float32'"):
        check_resume_allowed(saved, current, now.origins, checkpoint=tmp_path, step=3)


def test_a_key_newer_than_the_checkpoint_resumes_at_its_default_and_only_there(tmp_path, h):
    """Updating Enlace adds configuration keys; a checkpoint written before one existed resumes
    when the run's value is the key's default (it is the same run), and is still refused when the
    run sets another value, or when a key the checkpoint holds changed."""
    from enlace_train.checkpointing import check_resume_allowed

    now = h.load(h.make_run_file(tmp_path, "newer", train={"z_loss_weight": 0.5}))
    current = now.to_dict()
    assert current["train"]["grad_clip"] == 1.0  # the schema's default
    older = {**current, "train": dict(current["train"])}
    del older["train"]["grad_clip"]  # at its default today
    del older["train"]["muon_ns_steps"]  # at its default today
    allowed = check_resume_allowed(older, current, now.origins, checkpoint=tmp_path, step=3)
    assert allowed == []  # not a change at all
    del older["train"]["z_loss_weight"]  # absent from the checkpoint, but set to 0.5 now
    with pytest.raises(ResumeError, match=r"train\.z_loss_weight: None -> 0\.5"):
        check_resume_allowed(older, current, now.origins, checkpoint=tmp_path, step=3)
    older["train"]["z_loss_weight"] = 0.5
    changed = {**older, "train": {**older["train"], "beta2": 0.99}}
    with pytest.raises(ResumeError, match=r"train\.beta2: 0\.99 -> 0\.95"):
        check_resume_allowed(changed, current, now.origins, checkpoint=tmp_path, step=3)
