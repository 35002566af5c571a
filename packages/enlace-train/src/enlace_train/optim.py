"""Optimizers: AdamW, or Muon for the hidden matrices with AdamW for the rest (`train.optimizer`).

Muon (Keller Jordan, 2024; modded-nanogpt's speedrun records, nanochat) replaces a hidden weight
matrix's Nesterov-momentum update by the nearest semi-orthogonal matrix (a few Newton-Schulz
iterations), so rare directions learn as fast as common ones. Embeddings, the (tied) head, norms
and gains stay with AdamW. Both live in ONE `torch.optim.Optimizer` so that the GradScaler,
clipping and the exact-resume `state_dict` see one object; each group's `lr_scale` (its peak lr
over `train.lr`) lets one WSD schedule drive both. float32 and deterministic: resume is exact.
"""

from __future__ import annotations

from typing import Any

import torch
from enlace_config.schema import RunConfig

from enlace_train.backends import Backend

# The quintic Newton-Schulz coefficients of modded-nanogpt / torch.optim.Muon: they maximise the
# slope at zero, so five iterations push every singular value into about [0.7, 1.2].
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def orthogonalize(g: torch.Tensor, steps: int) -> torch.Tensor:
    """Approximately U V^T for g = U S V^T (Newton-Schulz iterations on the Frobenius-normed g)."""
    a, b, c = NS_COEFFICIENTS
    x = g.float()
    tall = x.size(0) > x.size(1)
    if tall:  # iterate on the wide orientation: X X^T is the smaller Gram matrix
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


class MuonAdamW(torch.optim.Optimizer):
    """Muon for groups with ``muon=True`` (2-D weights), AdamW for the others."""

    def __init__(self, groups: list[dict[str, Any]], *, betas: tuple[float, float], eps: float):
        defaults = {"lr": 0.0, "weight_decay": 0.0, "muon": False, "momentum": 0.95,
                    "ns_steps": 5, "betas": betas, "eps": eps, "lr_scale": 1.0}  # fmt: skip
        super().__init__(groups, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                update = (
                    self._muon(p, group, state) if group["muon"] else self._adam(p, group, state)
                )
                p.mul_(1 - lr * wd)
                p.add_(update.to(p.dtype), alpha=-lr)

    @staticmethod
    def _muon(p: torch.Tensor, group: dict[str, Any], state: dict[str, Any]) -> torch.Tensor:
        grad = p.grad.float()  # type: ignore[union-attr]
        if not state:
            state["momentum_buffer"] = torch.zeros_like(grad)
        buf = state["momentum_buffer"]
        beta = group["momentum"]
        buf.lerp_(grad, 1 - beta)
        nesterov = grad.lerp(buf, beta)
        update = orthogonalize(nesterov, group["ns_steps"])
        # scale so that the update's RMS does not shrink for tall matrices (rows > cols)
        return update * max(1.0, p.size(0) / p.size(1)) ** 0.5

    @staticmethod
    def _adam(p: torch.Tensor, group: dict[str, Any], state: dict[str, Any]) -> torch.Tensor:
        grad = p.grad.float()  # type: ignore[union-attr]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(grad)
            state["exp_avg_sq"] = torch.zeros_like(grad)
        state["step"] += 1
        beta1, beta2 = group["betas"]
        state["exp_avg"].lerp_(grad, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        m_hat = state["exp_avg"] / (1 - beta1 ** state["step"])
        v_hat = state["exp_avg_sq"] / (1 - beta2 ** state["step"])
        return m_hat / (v_hat.sqrt() + group["eps"])


def _param_roles(model: torch.nn.Module) -> tuple[set[int], set[int]]:
    """ids of embedding parameters (the tied head included) and of hidden 2-D matrices."""
    embedding = {
        id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()
    }
    hidden = {id(p) for p in model.parameters() if p.ndim == 2 and id(p) not in embedding}
    return embedding, hidden


def build_optimizer(
    model: torch.nn.Module, cfg: RunConfig, backend: Backend
) -> torch.optim.Optimizer:
    """The configured optimizer; weight decay on matrices only, embeddings only by config."""
    tc = cfg.train
    embedding, hidden = _param_roles(model)
    params = [p for p in model.parameters() if p.requires_grad]
    decays = [p for p in params if p.ndim >= 2 and (id(p) not in embedding or tc.decay_embeddings)]
    decay_ids = {id(p) for p in decays}
    plain = [p for p in params if id(p) not in decay_ids]
    if tc.optimizer == "adamw":
        return torch.optim.AdamW(
            [
                {"params": decays, "weight_decay": tc.weight_decay, "lr_scale": 1.0},
                {"params": plain, "weight_decay": 0.0, "lr_scale": 1.0},
            ],
            lr=tc.lr,
            betas=(tc.beta1, tc.beta2),
            eps=tc.eps,
            fused=True if backend.fused_adamw else None,
        )
    muon = [p for p in decays if id(p) in hidden]
    adam_decay = [p for p in decays if id(p) not in hidden]
    groups = [
        {"params": muon, "muon": True, "weight_decay": tc.weight_decay,
         "lr_scale": tc.muon_lr / tc.lr, "momentum": tc.muon_momentum, "ns_steps": tc.muon_ns_steps},
        {"params": adam_decay, "weight_decay": tc.weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]  # fmt: skip
    return MuonAdamW([g for g in groups if g["params"]], betas=(tc.beta1, tc.beta2), eps=tc.eps)
