"""Muon + AdamW: the update rule against a plain reference, the parameter split, exact resume."""

from __future__ import annotations

import copy

import pytest
import torch
from enlace_train.optim import MuonAdamW, build_optimizer, orthogonalize


def test_orthogonalize_makes_singular_values_near_one() -> None:
    g = torch.randn(48, 16, generator=torch.Generator().manual_seed(0))
    s = torch.linalg.svdvals(orthogonalize(g, steps=5))
    assert s.min() > 0.6 and s.max() < 1.25  # the quintic's band, not exactly 1
    # same singular vectors as U V^T: the product with the exact polar factor is near-diagonal
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    assert torch.allclose(orthogonalize(g, 30).T @ (u @ vh), torch.eye(16), atol=0.35)


def test_adam_groups_match_torch_adamw() -> None:
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(5, 3))
    ref = copy.deepcopy(w)
    ours = MuonAdamW(
        [{"params": [w], "weight_decay": 0.1, "lr": 1e-2}], betas=(0.9, 0.95), eps=1e-8
    )
    theirs = torch.optim.AdamW([ref], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for _ in range(5):
        g = torch.randn(5, 3)
        w.grad, ref.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
    assert torch.allclose(w, ref, atol=1e-6)


def test_muon_step_is_the_reference_rule() -> None:
    torch.manual_seed(1)
    w = torch.nn.Parameter(torch.randn(8, 4))
    start = w.detach().clone()
    opt = MuonAdamW([{"params": [w], "muon": True, "lr": 0.02, "weight_decay": 0.0}],
                    betas=(0.9, 0.95), eps=1e-8)  # fmt: skip
    g = torch.randn(8, 4)
    w.grad = g.clone()
    opt.step()
    buf = 0.05 * g  # momentum 0.95 from zero
    nesterov = g + 0.95 * (buf - g)
    expected = start - 0.02 * orthogonalize(nesterov, 5) * (8 / 4) ** 0.5
    assert torch.allclose(w, expected, atol=1e-6)


def test_build_optimizer_gives_hidden_matrices_to_muon(h, write_run) -> None:
    from enlace_model import build_model
    from enlace_train.backends import setup_backend

    cfg = h.load(write_run("muon", train={"optimizer": "muon", "muon_lr": 0.03})).config
    model = build_model(cfg.model)
    opt = build_optimizer(model, cfg, setup_backend(cfg.hardware))
    muon = [g for g in opt.param_groups if g["muon"]]
    assert len(muon) == 1
    names = {id(p): n for n, p in model.named_parameters()}
    muon_names = {names[id(p)] for p in muon[0]["params"]}
    assert "layers.0.attn.q_proj.weight" in muon_names
    assert "layers.1.mlp.down_proj.weight" in muon_names
    assert not any("embed" in n or "norm" in n for n in muon_names)
    assert muon[0]["lr_scale"] == pytest.approx(0.03 / cfg.train.lr)
    counted = sum(len(g["params"]) for g in opt.param_groups)
    assert counted == len([p for p in model.parameters() if p.requires_grad])


def test_the_short_convolution_kernel_stays_with_adamw(h, write_run) -> None:
    """Muon orthogonalises matrices; a depthwise kernel (C, 1, K) is C separate filters, so it
    goes to AdamW, with weight decay as the matrices; its two projections go to Muon."""
    from enlace_model import build_model
    from enlace_train.backends import setup_backend

    cfg = h.load(write_run("conv", train={"optimizer": "muon"}, model={"conv_layers": [0]})).config
    model = build_model(cfg.model)
    opt = build_optimizer(model, cfg, setup_backend(cfg.hardware))
    names = {id(p): n for n, p in model.named_parameters()}
    group = {names[id(p)]: g for g in opt.param_groups for p in g["params"]}
    assert not group["layers.0.conv.conv_weight"]["muon"]
    assert group["layers.0.conv.conv_weight"]["weight_decay"] == cfg.train.weight_decay
    assert group["layers.0.conv.in_proj.weight"]["muon"]
    assert group["layers.0.conv.out_proj.weight"]["muon"]


def test_muon_run_resumes_bit_exact_from_a_checkpoint(h, write_run) -> None:
    import shutil

    from enlace_model.checkpoint import list_checkpoints, load_state_dict
    from enlace_train.trainer import train

    sched = {"optimizer": "muon", "max_steps": 12, "checkpoint_every": 6, "keep_checkpoints": 3}
    ref = train(h.load(write_run("ref", train=sched)))
    path = write_run("cut", train=sched)
    cut = train(h.load(path))
    shutil.rmtree(list_checkpoints(cut.run_dir)[-1])  # back to step 6: momenta must come back exact
    train(h.load(path))
    losses = [
        [r["loss"] for r in h.metrics_rows(d) if "loss" in r] for d in (ref.run_dir, cut.run_dir)
    ]
    assert losses[0] == losses[1] and len(losses[0]) == 12
    a, b = (load_state_dict(list_checkpoints(d)[-1]) for d in (ref.run_dir, cut.run_dir))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_muon_with_fsdp_is_refused_at_start_up(h, write_run) -> None:
    from enlace_config import ConfigError

    with pytest.raises(ConfigError, match="muon"):
        h.load(write_run("m", train={"optimizer": "muon", "parallelism": "fsdp"}))
