"""Never lose a run, never train on garbage (issue 21): damaged checkpoints are named and skipped,
never counted by pruning, and a run directory whose checkpoints are all unusable stops unless the
user asks to start over; a diverged run stops naming the step; bad paths and sampling arguments are
refused with exit 2.

One run is trained once per module; each test damages its own copy of the run directory."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from enlace_model.checkpoint import list_checkpoints, load_state_dict, verify_checkpoint
from enlace_train.cli import main
from enlace_train.errors import Diverged
from enlace_train.trainer import train


@pytest.fixture(scope="module")
def base(tmp_path_factory, h) -> Path:
    """A finished 12-step run with checkpoints at steps 4, 8 and 12."""
    return train(h.load(h.make_run_file(tmp_path_factory.mktemp("base"), "base"))).run_dir


def copy_of(base: Path, tmp_path: Path, h) -> Path:
    """The base run's file, its run directory a copy of `base` under tmp_path."""
    path = h.make_run_file(tmp_path, "base")
    shutil.copytree(base, h.run_dir_of(path))
    return path


def ckpt(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step_{step}"


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in load_state_dict(checkpoint).items()}


def rewrite_complete(checkpoint: Path, files: object = None) -> None:
    """Recompute the COMPLETE marker over whatever the files now hold (or write `files`)."""
    marker = json.loads((checkpoint / "COMPLETE").read_text())
    if files is None:
        files = {
            p.relative_to(checkpoint).as_posix(): {
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                "bytes": p.stat().st_size,
            }
            for p in sorted(checkpoint.rglob("*"))
            if p.is_file() and p.name != "COMPLETE"
        }
    marker["files"] = files
    (checkpoint / "COMPLETE").write_text(json.dumps(marker))


def flip_a_byte(checkpoint: Path) -> None:
    blob = checkpoint / "model.safetensors"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))


# ----------------------------------------------------------------------------- 1. all unusable
def damage_all(run_dir: Path) -> None:
    flip_a_byte(ckpt(run_dir, 4))  # a hash mismatch
    rewrite_complete(ckpt(run_dir, 8), {})  # a COMPLETE marker listing no files
    (ckpt(run_dir, 12) / "COMPLETE").unlink()  # incomplete


def test_all_checkpoints_unusable_stops_naming_each_and_keeps_everything(base, tmp_path, h, capsys):
    path = copy_of(base, tmp_path, h)
    run_dir = h.run_dir_of(path)
    damage_all(run_dir)
    metrics = (run_dir / "metrics.jsonl").read_bytes()
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    for step, why in ((4, "checksum mismatch"), (8, "lists no files"), (12, "incomplete")):
        assert f"step_{step}" in err and why in err
    assert "train.on_corrupt_checkpoints=restart" in err and "Traceback" not in err
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics  # never truncated silently
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "best",
        "step_12",
        "step_4",
        "step_8",
    ]


def test_restart_when_asked_sets_them_and_the_metrics_aside(base, tmp_path, h):
    path = copy_of(base, tmp_path, h)
    run_dir = h.run_dir_of(path)
    damage_all(run_dir)
    old_metrics = (run_dir / "metrics.jsonl").read_bytes()
    summary = train(h.load(path, "train.on_corrupt_checkpoints=restart"))
    assert summary.step == 12
    aside = run_dir / "checkpoints" / "corrupt"
    assert sorted(p.name for p in aside.iterdir()) == [
        "best",  # the old run's best weights, kept (the new run has its own)
        "metrics.jsonl",
        "step_12",
        "step_4",
        "step_8",
    ]
    assert (aside / "metrics.jsonl").read_bytes() == old_metrics
    assert [r["step"] for r in h.metrics_rows(run_dir) if "loss" in r] == list(range(1, 13))
    log = (run_dir / "train.log").read_text()
    assert "restarting from step 0" in log and "step_8" in log
    # a run started over with the same seed is the same run
    new, old = weights(ckpt(run_dir, 12)), weights(ckpt(base, 12))
    assert all(torch.equal(new[k], old[k]) for k in old)


# ----------------------------------------------------------------------------- 2. pruning
def add_corrupt_copies(run_dir: Path, steps: list[int]) -> None:
    for step in steps:
        shutil.copytree(ckpt(run_dir, 12), ckpt(run_dir, step))
        flip_a_byte(ckpt(run_dir, step))


def test_pruning_never_counts_corrupt_newer_checkpoints(base, tmp_path, h):
    path = copy_of(base, tmp_path, h)
    run_dir = h.run_dir_of(path)
    add_corrupt_copies(run_dir, [30, 35, 40])
    summary = train(h.load(path, "train.max_steps=20"))
    assert summary.step == 20
    kept = list_checkpoints(run_dir)
    assert [p.name for p in kept] == ["step_12", "step_16", "step_20"]
    for p in kept:
        verify_checkpoint(p)
    aside = sorted(p.name for p in (run_dir / "checkpoints" / "corrupt").iterdir())
    assert aside == ["step_30", "step_35", "step_40"]


def test_pruning_never_counts_corrupt_older_checkpoints(base, tmp_path, h):
    path = copy_of(base, tmp_path, h)
    run_dir = h.run_dir_of(path)
    flip_a_byte(ckpt(run_dir, 4))
    flip_a_byte(ckpt(run_dir, 8))
    train(h.load(path, "train.max_steps=16"))
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_12", "step_16"]
    aside = sorted(p.name for p in (run_dir / "checkpoints" / "corrupt").iterdir())
    assert aside == ["step_4", "step_8"]


def test_a_restarted_run_keeps_its_new_checkpoints(base, tmp_path, h):
    """The issue's case: only corrupt [30, 35, 40] remained after the restarted run's pruning."""
    path = copy_of(base, tmp_path, h)
    run_dir = h.run_dir_of(path)
    add_corrupt_copies(run_dir, [30, 35, 40])
    for step in (4, 8, 12):
        flip_a_byte(ckpt(run_dir, step))
    train(h.load(path, "train.on_corrupt_checkpoints=restart"))
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_4", "step_8", "step_12"]
    for p in list_checkpoints(run_dir):
        verify_checkpoint(p)


# ----------------------------------------------------------------------------- 3. replaced files
def truncate_weights(c: Path) -> None:
    blob = c / "model.safetensors"
    blob.write_bytes(blob.read_bytes()[: blob.stat().st_size // 2])


def other_shapes(c: Path) -> None:
    from enlace_model import build_model
    from enlace_model.checkpoint import read_model_config, save_model

    cfg = read_model_config(c).model_copy(update={"d_model": 64})
    save_model(c, build_model(cfg), cfg)  # model.json too: it agrees with the tensors


def foreign_state(c: Path) -> None:
    torch.save({"format": 1, "step": 12, "hello": "world"}, c / "trainer_state.pt")


def not_a_dict_state(c: Path) -> None:
    torch.save([1, 2, 3], c / "trainer_state.pt")


def another_steps_state(c: Path) -> None:
    shutil.copy(c.parent / "step_8" / "trainer_state.pt", c / "trainer_state.pt")


def moments_of_another_shape(c: Path) -> None:
    state = torch.load(c / "trainer_state.pt", weights_only=True)
    moments = state["optimizer"]["state"][0]
    moments["exp_avg"] = torch.zeros(3, 3)
    torch.save(state, c / "trainer_state.pt")


REPLACED = {
    "truncated weights": (truncate_weights, "not a readable safetensors file"),
    "wrong tensor shapes": (other_shapes, "weights do not match"),
    "foreign trainer state": (foreign_state, "not a trainer state"),
    "trainer state not a dict": (not_a_dict_state, "trainer-state format 'list'"),
    "another step's trainer state": (another_steps_state, "that of step 8"),
    "optimizer moments of another shape": (moments_of_another_shape, "exp_avg of shape (3, 3)"),
}


@pytest.mark.parametrize("case", REPLACED)
def test_replaced_files_with_recomputed_hashes_fall_back_like_a_hash_mismatch(
    base, tmp_path, h, case
):
    damage, why = REPLACED[case]
    path = copy_of(base, tmp_path, h)
    run_dir = h.run_dir_of(path)
    damage(ckpt(run_dir, 12))
    rewrite_complete(ckpt(run_dir, 12))
    verify_checkpoint(ckpt(run_dir, 12))  # the hashes agree: only reading it tells
    summary = train(h.load(path))
    log = (run_dir / "train.log").read_text()
    assert "skipping checkpoint" in log and why in log and "step_12" in log
    assert "from " + str(ckpt(run_dir, 8)) in log
    assert summary.step == 12  # steps 9..12 again, from step 8: the same weights, bit for bit
    new, old = weights(ckpt(run_dir, 12)), weights(ckpt(base, 12))
    assert all(torch.equal(new[k], old[k]) for k in old)


def test_every_checkpoint_replaced_is_bad_input_not_an_internal_error(base, tmp_path, h, capsys):
    path = copy_of(base, tmp_path, h)
    run_dir = h.run_dir_of(path)
    for step, damage in ((4, truncate_weights), (8, foreign_state), (12, other_shapes)):
        damage(ckpt(run_dir, step))
        rewrite_complete(ckpt(run_dir, step))
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "report" not in err and "--debug" not in err
    for step, why in ((4, "safetensors"), (8, "not a trainer state"), (12, "do not match")):
        assert f"step_{step}" in err and why in err


# ----------------------------------------------------------------------------- 4. divergence
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_non_finite_loss_stops_the_run_naming_the_step(write_run, h, capsys, monkeypatch, dtype):
    # bfloat16's path on any CPU: where it lacks the instructions torch emulates them (slowly)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    path = write_run(
        f"nan-{dtype}",
        hardware={"dtype": dtype},
        model={"init_std": 1e30},
        train={"checkpoint_every": 1},
    )
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "step 1:" in err and "not finite" in err and dtype in err and "train.lr" in err
    run_dir = h.run_dir_of(path)
    assert not (run_dir / "checkpoints").exists()  # nothing saved
    assert not any("loss" in r for r in h.metrics_rows(run_dir))


def test_divergence_after_good_steps_saves_nothing_new(write_run, h):
    path = write_run("diverge-late", train={"checkpoint_every": 1, "weight_decay": 1e6})
    with pytest.raises(Diverged) as info:
        train(h.load(path))
    step = int(str(info.value).split(":")[0].removeprefix("step "))
    assert step > 1
    run_dir = h.run_dir_of(path)
    assert list_checkpoints(run_dir)[-1].name == f"step_{step - 1}"
    assert [r["step"] for r in h.metrics_rows(run_dir) if "loss" in r][-1] == step - 1


def test_float16_skips_are_expected_but_a_long_streak_stops_the_run(write_run, h):
    fp16 = {"dtype": "float16", "loss_scaling": True, "grad_scaler_init_scale": 2.0**40}
    path = write_run("fp16-streak", hardware=fp16, train={"max_skipped_steps_in_a_row": 3})
    with pytest.raises(Diverged, match=r"4 optimizer steps in a row skipped") as info:
        train(h.load(path))
    assert "train.max_skipped_steps_in_a_row=3" in str(info.value)
    assert "steps 1-4" in str(info.value)
    assert not (h.run_dir_of(path) / "checkpoints").exists()
    ok = train(h.load(write_run("fp16-ok", hardware=fp16, train={"max_steps": 12})))
    assert h.metrics_rows(ok.run_dir)[-2]["skipped_steps"] > 3  # the default limit lets it pass


# ----------------------------------------------------------------------------- 8. paths
def test_init_from_nowhere_or_not_a_checkpoint_exits_2_naming_the_key(write_run, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "nowhere", tmp_path / "empty"):
        path = write_run("branch", train={"init_from": str(target)})
        assert main([str(path)]) == 2
        err = capsys.readouterr().err
        assert "train.init_from" in err and str(target) in err and "--debug" not in err


def test_out_dir_that_is_a_file_exits_2_naming_the_key(write_run, h, capsys):
    path = write_run("filedir")
    run_dir = h.run_dir_of(path)
    run_dir.parent.mkdir(parents=True)
    run_dir.write_text("not a directory")
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "run.out_dir" in err and str(run_dir) in err and "--debug" not in err


# ----------------------------------------------------------------------------- 14. sample
@pytest.mark.parametrize("command", ["sample", "chat"])  # one set of generation options
@pytest.mark.parametrize(
    "args",
    [
        ["--max-new-tokens", "-5"],
        ["--max-new-tokens", "0"],
        ["--temperature", "nan"],
        ["--temperature", "-1"],
        ["--top-k", "0"],  # sample only (chat has no --top-k: refused as unknown)
        ["--top-p", "1.5"],
        ["--top-p", "0"],
    ],
)
def test_sample_and_chat_refuse_nonsense_arguments(tmp_path, capsys, command, args):
    prompt = ["--prompt", "Hola"] if command == "sample" else []
    with pytest.raises(SystemExit) as info:
        main([command, str(tmp_path), *prompt, *args])
    assert info.value.code == 2
    assert args[0] in capsys.readouterr().err


# ----------------------------------------------------------------------------- 8. memory at start-up
def test_a_model_that_cannot_fit_the_device_is_refused_at_start_up(write_run, capsys):
    """800 B parameters cannot fit any machine this runs on: exit 2 naming the keys, before any
    allocation (without the check the run died allocating, through the internal-error path)."""
    path = write_run("huge", model={"d_model": 8192, "n_layers": 1000, "ffn_hidden": 24576})
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert "model.d_model" in err and "hardware.micro_batch_size" in err and "GiB" in err
    assert "Traceback" not in err
