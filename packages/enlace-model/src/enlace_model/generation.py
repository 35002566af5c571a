"""Autoregressive generation on token ids with a KV cache.

- The cache is allocated once per call, for the longest prompt plus max_new_tokens, as one
  (B, KV, L, D) key and value tensor per layer written in place: no growth, no re-allocation.
- A batch of prompts of different lengths is left-padded. Each sequence's rotary positions start
  at 0 at its first real token and an additive mask hides the padding, so every sequence gets the
  tokens it would get alone (tests check this against full recomputation in float64).
- Decoding steps run one query per sequence through `Transformer.forward_cached`, whose attention
  takes the single-query path (two matmuls, no SDPA dispatch) under the `auto` and `math` backends.
- Greedy when temperature == 0; otherwise temperature, then top-k, then top-p (nucleus), then one
  draw per sequence with the exponential-race trick (argmax(p / E), E ~ Exp(1)) from a
  torch.Generator seeded by `seed`: the draws do not depend on the probabilities' last bits, so the
  same seed gives the same tokens whether the logits came from the cache or from recomputation.
- Stop tokens end a sequence; the stop token itself is not returned or streamed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import Tensor

from enlace_model.model import Transformer

__all__ = ["generate", "generate_stream", "sample_next"]


def _filter_logits(
    logits: Tensor, temperature: float, top_k: int | None, top_p: float | None
) -> Tensor:
    """logits (B, V) → probabilities (B, V) after temperature, top-k and top-p."""
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)  # (B, V)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # mass of the better tokens
        drop_sorted = before >= top_p  # the smallest set reaching top_p is kept (at least one)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
    return probs


def sample_next(
    logits: Tensor,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The next token per row of logits (B, V) → (B,) int64."""
    if temperature == 0.0:
        return torch.argmax(logits, dim=-1)
    probs = _filter_logits(
        logits.float() if logits.dtype != torch.float64 else logits, temperature, top_k, top_p
    )
    race = torch.empty_like(probs).exponential_(1.0, generator=generator)
    return torch.argmax(probs / race, dim=-1)


def _check_args(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
) -> None:
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("generate needs at least one prompt, and every prompt at least one token")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    vocab = model.cfg.vocab_size
    for p in prompts:
        bad = [t for t in p if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"token id {bad[0]} outside the vocabulary (0..{vocab - 1})")
    longest = max(len(p) for p in prompts) + max_new_tokens
    if longest > model.cfg.context_length:
        raise ValueError(
            f"prompt ({max(len(p) for p in prompts)} tokens) + max_new_tokens ({max_new_tokens}) "
            f"exceeds the model's context_length ({model.cfg.context_length})"
        )


def generate_stream(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_tokens: Iterable[int] = (),
    seed: int | None = None,
) -> Iterator[list[int | None]]:
    """Yield, after each decoding step, the new token of every sequence (None for a sequence that
    has already stopped). Ends after max_new_tokens steps or when every sequence has stopped."""
    _check_args(model, prompts, max_new_tokens, temperature, top_k, top_p)
    if max_new_tokens == 0:
        return
    stops = set(stop_tokens)
    cfg = model.cfg
    weight = model.embed.weight
    device, dtype = weight.device, weight.dtype
    B = len(prompts)
    P = max(len(p) for p in prompts)  # prompt slots; shorter prompts are left-padded
    L = P + max_new_tokens
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)

    with torch.inference_mode():
        shape = (B, cfg.n_kv_heads, L, cfg.head_dim)
        cache = [
            (
                torch.empty(shape, device=device, dtype=dtype),
                torch.empty(shape, device=device, dtype=dtype),
            )
            for _ in range(cfg.n_layers)
        ]
        pads = [P - len(p) for p in prompts]
        idx = torch.tensor(
            [[0] * pad + list(p) for pad, p in zip(pads, prompts, strict=True)],
            dtype=torch.long,
            device=device,
        )  # (B, P)
        positions = key_mask = prefill_mask = None
        if any(pads):
            pad_t = torch.tensor(pads, device=device)  # (B,)
            slots = torch.arange(L, device=device)  # (L,)
            positions = (slots.unsqueeze(0) - pad_t.unsqueeze(1)).clamp(min=0)  # (B, L)
            real = slots.unsqueeze(0) >= pad_t.unsqueeze(1)  # (B, L): slot holds a real token
            key_mask = torch.zeros(B, 1, 1, L, device=device, dtype=dtype)
            key_mask.masked_fill_(~real.view(B, 1, 1, L), float("-inf"))  # (B, 1, 1, L)
            causal = torch.ones(P, P, dtype=torch.bool, device=device).tril()  # (P, P)
            # A padding query sees only itself, so no softmax row is empty (no NaN anywhere).
            allowed = (causal & real[:, None, :P]) | torch.eye(P, dtype=torch.bool, device=device)
            prefill_mask = torch.zeros(B, 1, P, P, device=device, dtype=dtype)
            prefill_mask.masked_fill_(~allowed.view(B, 1, P, P), float("-inf"))  # (B, 1, P, P)

        logits = model.forward_cached(
            idx, cache, 0, None if positions is None else positions[:, :P], prefill_mask
        )  # (B, V)
        alive = [True] * B
        tables = model.decode_tables() if model.decode_fast_path() else None
        step_ids = torch.empty(B, 1, dtype=torch.long, device=device)  # reused every step
        for step in range(max_new_tokens):
            nxt = sample_next(
                logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
            )  # (B,)
            tokens = nxt.tolist()
            out: list[int | None] = []
            for i, t in enumerate(tokens):
                if alive[i] and t in stops:
                    alive[i] = False
                out.append(t if alive[i] else None)
            yield out
            if not any(alive) or step == max_new_tokens - 1:
                return
            s = P + step  # the cache slot of this new token
            step_mask = None if key_mask is None else key_mask[..., : s + 1]  # (B, 1, 1, s+1)
            if tables is not None:
                logits = model.decode_step(
                    nxt, cache, s, tables, None if positions is None else positions[:, s], step_mask
                )
            else:
                step_ids.copy_(nxt.view(B, 1))
                logits = model.forward_cached(
                    step_ids,
                    cache,
                    s,
                    None if positions is None else positions[:, s : s + 1],
                    step_mask,
                )


def generate(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_tokens: Iterable[int] = (),
    seed: int | None = None,
) -> list[list[int]]:
    """The new tokens of each prompt (prompt excluded, stop token excluded)."""
    outs: list[list[int]] = [[] for _ in prompts]
    for step in generate_stream(
        model,
        prompts,
        max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        stop_tokens=stop_tokens,
        seed=seed,
    ):
        for i, t in enumerate(step):
            if t is not None:
                outs[i].append(t)
    return outs
