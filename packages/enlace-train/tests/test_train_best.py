"""The best validation figure is tracked (issue 13): its weights are kept in checkpoints/best, the
tracking survives a resume, pruning never touches it, and a run that got worse says so last."""

from __future__ import annotations

import math

import pytest
import torch
from enlace_model import load_model
from enlace_model.checkpoint import list_checkpoints, load_state_dict, verify_checkpoint
from enlace_train import trainer
from enlace_train.cli import main
from enlace_train.trainer import train

# validation bits/byte per evaluation (every 4 steps of 12): best at step 4, then worse twice
SCRIPTED = [2.0, 2.5, 3.0]


@pytest.fixture
def scripted_evaluation(monkeypatch):
    real = trainer.evaluate
    values = iter(SCRIPTED * 4)
    seen: list[dict[str, torch.Tensor]] = []

    def evaluate(model, batches, backend, bytes_per_token, info):
        real(model, batches, backend, bytes_per_token, info)  # the real work, a scripted figure
        seen.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        bpb = next(values)
        return bpb * math.log(2), bpb

    monkeypatch.setattr(trainer, "evaluate", evaluate)
    return seen


def test_best_weights_are_kept_and_a_worse_end_is_said(write_run, h, scripted_evaluation, capsys):
    path = write_run("worse", train={"keep_checkpoints": 1})
    assert main([str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    run_dir = h.run_dir_of(path)
    assert "val bits/byte 3.0000 -- WORSE than its best, 2.0000 at step 4" in out
    assert "rose over the last 2 evaluation(s)" in out and str(run_dir / "checkpoints/best") in out
    best = run_dir / "checkpoints" / "best"
    verify_checkpoint(best)
    assert [p.name for p in list_checkpoints(run_dir)] == ["step_12"]  # pruning kept only 1 step
    saved = load_state_dict(best)
    assert all(torch.equal(saved[k], scripted_evaluation[0][k]) for k in saved)  # step 4's weights
    model = load_model(best)  # a checkpoint like the others for the library
    assert sum(p.numel() for p in model.parameters()) > 0


def test_best_tracking_survives_a_resume(write_run, h, scripted_evaluation):
    path = write_run("resumed", train={"max_steps": 8})
    train(h.load(path))  # evaluations at 4 (2.0, best) and 8 (2.5)
    summary = train(h.load(path, "train.max_steps=12"))  # resumed: 12 scores 3.0
    assert (summary.best_val_bpb, summary.best_step) == (2.0, 4)


def test_a_run_that_ends_at_its_best_says_nothing_more(write_run, h, monkeypatch, capsys):
    path = write_run("fine")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.startswith("done: step 12") and "WORSE" not in out
    assert (h.run_dir_of(path) / "checkpoints" / "best" / "model.safetensors").is_file()
