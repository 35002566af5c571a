"""A short real run in-process: loss falls, metrics and checkpoints appear, the checkpoint loads with
enlace_model and samples text, and the trainer state reads back with weights_only=True."""

from __future__ import annotations

import json

import torch
from enlace_model import load_model
from enlace_model.checkpoint import TRAINER_STATE_FILE
from enlace_train.sample import sample_text
from enlace_train.trainer import train


def test_short_run_loss_falls_and_leaves_a_usable_checkpoint(write_run, h):
    path = write_run(
        "e2e",
        train={
            "max_steps": 30,
            "lr": 1e-2,
            "warmup_steps": 3,
            "decay_steps": 6,
            "log_every": 5,
            "eval_every": 15,
            "checkpoint_every": 15,
        },
    )
    summary = train(h.load(path))
    run_dir = summary.run_dir
    rows = h.metrics_rows(run_dir)
    losses = [r["loss"] for r in rows if "loss" in r]
    vals = [r for r in rows if "val_loss" in r]
    assert [r["step"] for r in rows if "loss" in r] == [5, 10, 15, 20, 25, 30]
    assert losses[-1] < losses[0] - 0.5
    assert [r["step"] for r in vals] == [15, 30] and vals[-1]["val_loss"] < vals[0]["val_loss"]
    assert summary.final_val_bpb == vals[-1]["val_bpb"]
    for key in ("lr", "grad_norm", "tokens_per_s", "elapsed_s", "eta_s", "peak_mem_mb", "z_loss"):
        assert key in rows[0]
    assert (run_dir / "config.yaml").is_file() and (run_dir / "train.log").is_file()
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "best",
        "step_15",
        "step_30",
    ]

    model = load_model(run_dir)
    assert model.cfg.d_model == 32
    text = sample_text(str(run_dir), "El ", max_new_tokens=40, seed=1)
    assert text.startswith("El ") and len(text.encode()) > 3

    state = torch.load(run_dir / "checkpoints" / "step_30" / TRAINER_STATE_FILE, weights_only=True)
    assert state["step"] == 30 and state["tokens_seen"] == 30 * 4 * 32
    assert state["num_threads"] == 1
    assert set(state["rng"]) == {"python", "numpy", "torch_cpu", "torch_cuda"}
    assert state["loader"]["samples_consumed"] == 30 * 4
    assert state["config"]["model"]["d_model"] == 32 and "train.max_steps" in state["origins"]
    assert set(state["versions"]) >= {"torch", "enlace-train", "enlace-model"}
    assert len(state["uv_lock_sha256"]) == 64
    assert "git_commit" in state and state["optimizer"]["state"]
    json.dumps(state["loader"])  # JSON-serialisable, as the loader promises
