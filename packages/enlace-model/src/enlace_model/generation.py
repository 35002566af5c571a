"""Generation: the KV cache and the decoding loop on token ids (the model is in model.py).

- The cache is allocated once per window, for the longest prompt plus the tokens to generate in
  it, as one (B, KV, L, D) key and value tensor per layer written in place (a short-convolution
  layer keeps its b * x, (B, L, C), instead: `Transformer.new_cache`): no growth.
- Past the model's context the window slides: the last context/2 tokens of each sequence are read
  again (one prefill) into a fresh cache and decoding goes on, so `generate(model, [ids], 500)`
  works on a model of context 128. A prompt as long as the context keeps its last context/2 tokens.
- A batch of prompts of different lengths is left-padded: each prompt is prefilled alone into its
  row of the cache after its padding (plain causal attention, no (B, 1, P, P) mask), then the
  batch decodes together, each sequence's rotary positions starting at 0 at its first real token
  and an additive mask hiding the padding, so every sequence gets the tokens it would get alone
  (tests check this against full recomputation in float64).
- The prompt goes through `Transformer.forward_cached`. Decoding steps in float32/float64 under
  the `auto` and `math` backends take `_decode_step`: the same network as functional calls, q|k|v
  and gate|up stacked, on CPU the thread pool given to the matmuls only (per-token overhead, not
  FLOPs, limits batch-1 decoding). A test holds it equal to the module path.
- Greedy when temperature == 0; otherwise temperature, then top-k, then top-p (nucleus), then one
  draw per sequence with the exponential-race trick (argmax(p / E), E ~ Exp(1)) from a
  torch.Generator seeded by `seed`: the draws do not depend on the probabilities' last bits, so the
  same seed gives the same tokens whether the logits came from the cache or from recomputation.
- Stop tokens end a sequence; the stop token itself is not returned or streamed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TypedDict, Unpack

import torch
import torch.nn.functional as F
from torch import Tensor

from enlace_model.model import Block, LayerCache, Transformer

# _decode_step on CPU: only matmuls use the thread pool (see there). A switch for benchmarks.
SPLIT_DECODE_THREADS = True

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
    stops = set(stop_tokens)
    generator = None
    if seed is not None:
        generator = torch.Generator(device=model.embed.weight.device).manual_seed(seed)
    context = model.cfg.context_length
    windows = [list(p) if len(p) < context else list(p[-(context // 2) :]) for p in prompts]
    alive = [True] * len(prompts)
    produced = 0
    sample = partial(
        sample_next, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator
    )
    while produced < max_new_tokens:
        n = min(max_new_tokens - produced, context - max(len(w) for w in windows))
        for tokens in _decode_window(model, windows, n, sample):
            out: list[int | None] = []
            for i, t in enumerate(tokens):
                alive[i] = alive[i] and t not in stops
                out.append(t if alive[i] else None)
                windows[i].append(t)
            yield out
            produced += 1
            if not any(alive):
                return
        windows = [w[-(context // 2) :] for w in windows]


def _decode_window(
    model: Transformer, prompts: list[list[int]], n: int, sample: Callable[[Tensor], Tensor]
) -> Iterator[list[int]]:
    """n tokens per prompt (all fit in the context), each step's tokens as soon as they exist."""
    weight = model.embed.weight
    device, dtype = weight.device, weight.dtype
    B = len(prompts)
    P = max(len(p) for p in prompts)  # prompt slots; shorter prompts are left-padded
    L = P + n
    with torch.inference_mode():
        cache = model.new_cache(B, L)
        pads = [P - len(p) for p in prompts]
        positions = key_mask = None
        if any(pads):
            pad_t = torch.tensor(pads, device=device)  # (B,)
            slots = torch.arange(L, device=device)  # (L,)
            positions = (slots.unsqueeze(0) - pad_t.unsqueeze(1)).clamp(min=0)  # (B, L)
            real = slots.unsqueeze(0) >= pad_t.unsqueeze(1)  # (B, L): slot holds a real token
            key_mask = torch.zeros(B, 1, 1, L, device=device, dtype=dtype)
            key_mask.masked_fill_(~real.view(B, 1, 1, L), float("-inf"))  # (B, 1, 1, L)
            logits = _prefill_each(model, prompts, pads, cache)  # (B, V)
        else:
            idx = torch.tensor(prompts, dtype=torch.long, device=device)  # (B, P)
            logits = model.forward_cached(idx, cache, 0)  # (B, V)
        fast = model.attention in ("auto", "math") and dtype in (torch.float32, torch.float64)
        tables = _decode_tables(model) if fast else None
        step_ids = torch.empty(B, 1, dtype=torch.long, device=device)  # reused every step
        for step in range(n):
            nxt = sample(logits)  # (B,)
            yield nxt.tolist()
            if step == n - 1:
                return
            s = P + step  # the cache slot of this new token
            step_mask = None if key_mask is None else key_mask[..., : s + 1]  # (B, 1, 1, s+1)
            at = None if positions is None else positions[:, s : s + 1]  # (B, 1)
            if tables is not None:
                at = None if at is None else at[:, 0]
                logits = _decode_step(model, nxt, cache, s, tables, at, step_mask)
            else:
                step_ids.copy_(nxt.view(B, 1))
                logits = model.forward_cached(step_ids, cache, s, at, step_mask)


def _prefill_each(
    model: Transformer, prompts: list[list[int]], pads: list[int], cache: Sequence[LayerCache]
) -> Tensor:
    """Left-padded prompts' prefill, one prompt at a time, each written into its row of `cache`
    after its padding, whose slots are zeroed (the decoding mask hides them; zeros keep NaN out of
    q·k and are what a convolution reads before a first position) → last logits (B, V).

    Alone, a prompt's attention is plain causal (the fused kernel, no mask): the batched prefill
    with a (B, 1, P, P) mask built 2.0 GiB of mask for 64 prompts of up to 2,909 tokens and was
    3.4x slower on 2 cores (benchmarks/bench_ragged_prefill.py)."""
    logits = []
    for row, (pad, prompt) in enumerate(zip(pads, prompts, strict=True)):
        own: list[LayerCache] = []
        for first, second in cache:
            if first.dim() == 4:  # keys and values (B, KV, L, D)
                first[row, :, :pad].zero_()
                second[row, :, :pad].zero_()
                own.append((first[row : row + 1, :, pad:], second[row : row + 1, :, pad:]))
            else:  # a short convolution's b * x (B, L, C), zeroed already
                own.append((first[row : row + 1, pad:], second))
        idx = torch.tensor([prompt], dtype=torch.long, device=first.device)  # (1, T)
        logits.append(model.forward_cached(idx, own, 0))
    return torch.cat(logits)  # (B, V)


class Sampling(TypedDict, total=False):
    """generate's keyword options: generate_stream's, with its defaults."""

    temperature: float
    top_k: int | None
    top_p: float | None
    stop_tokens: Iterable[int]
    seed: int | None


def generate(
    model: Transformer,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    **sampling: Unpack[Sampling],
) -> list[list[int]]:
    """The new tokens of each prompt (prompt excluded, stop token excluded); the options are
    generate_stream's."""
    outs: list[list[int]] = [[] for _ in prompts]
    for step in generate_stream(model, prompts, max_new_tokens, **sampling):
        for i, t in enumerate(step):
            if t is not None:
                outs[i].append(t)
    return outs


# --- the decoding step: one token per sequence, minimal Python ----------------------------------
# One block's weights in _decode_step's order: attn_norm, q|k|v stacked, q_norm, k_norm, o,
# mlp_norm, gate|up stacked, down. A short-convolution block: attn_norm, in_proj, the kernel (C, K),
# out_proj and the same three MLP weights (7 instead of 8: its length tells the two apart).
LayerWeights = tuple[Tensor, Tensor, Tensor | None, Tensor | None, Tensor, Tensor, Tensor, Tensor]
ConvLayerWeights = tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


@dataclass
class DecodeTables:
    """What `_decode_step` reads each step, gathered once per window."""

    layers: list[LayerWeights | ConvLayerWeights]
    cos_q: Tensor
    sin_q: Tensor
    cos_k: Tensor
    sin_k: Tensor


def _decode_tables(model: Transformer) -> DecodeTables:
    """What decode_step reads, gathered once per generation: the q/k/v and gate/up matrices
    stacked (one matmul each instead of three and two: fewer dispatches and fewer thread
    barriers per token, the same bytes read; a temporary copy of those weights), the others by
    reference, and rotary tables folded for decoding: rotate_half(x) = roll(x, D/2) * [-1…, +1…],
    with q's tables carrying the 1/sqrt(D) scale."""
    layers: list[LayerWeights | ConvLayerWeights] = []
    for layer in model.layers:
        assert isinstance(layer, Block)
        a, c, m = layer.attn, layer.conv, layer.mlp
        gate_up = torch.cat((m.gate_proj.weight, m.up_proj.weight))  # (2·F, C)
        mlp = (layer.mlp_norm.weight, gate_up, m.down_proj.weight)
        if c is not None:
            conv = (
                layer.attn_norm.weight,
                c.in_proj.weight,
                c.conv_weight[:, 0],
                c.out_proj.weight,
            )
            layers.append((*conv, *mlp))
            continue
        assert a is not None
        qkv = torch.cat((a.q_proj.weight, a.k_proj.weight, a.v_proj.weight))  # ((H+2KV)·D, C)
        qn, kn = (None if n is None else n.weight for n in (a.q_norm, a.k_norm))
        layers.append((layer.attn_norm.weight, qkv, qn, kn, a.o_proj.weight, *mlp))
    D = model.cfg.head_dim
    sign = torch.ones(D, dtype=model.rope_sin.dtype, device=model.rope_sin.device)
    sign[: D // 2] = -1.0
    scale = 1.0 / math.sqrt(D)
    sin = model.rope_sin * sign  # (context, D)
    return DecodeTables(layers, model.rope_cos * scale, sin * scale, model.rope_cos, sin)


@contextmanager
def _threads_for_matmuls_only(device: torch.device) -> Iterator[Callable[[Tensor, Tensor], Tensor]]:
    """Yield the `linear` to use. On CPU only the matrix products get the thread pool: waking a
    second thread for a norm, a rotation or a 4×S softmax costs more than the work, and on a busy
    machine far more (a descheduled thread stalls every parallel region). Switching costs < 1 µs."""
    threads = torch.get_num_threads()
    if not (threads > 1 and device.type == "cpu" and SPLIT_DECODE_THREADS):
        yield F.linear
        return

    def linear(h: Tensor, w: Tensor) -> Tensor:
        torch.set_num_threads(threads)
        try:
            return F.linear(h, w)
        finally:
            torch.set_num_threads(1)

    torch.set_num_threads(1)
    try:
        yield linear
    finally:
        torch.set_num_threads(threads)


def _decode_step(
    model: Transformer,
    tokens: Tensor,
    cache: Sequence[LayerCache],
    pos: int,
    tables: DecodeTables,
    positions: Tensor | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """One new token per sequence, tokens (B,) at cache slot `pos` → logits (B, V).

    `Transformer.forward_cached` with T = 1 under the math backend, as functional calls on weight
    references: no module or SDPA dispatch, no kv-head expansion, rotary as two multiply-adds.
    positions (B,): per-sequence rotary positions (left-padded batches); mask additive
    (B, 1, 1, pos+1)."""
    p = pos if positions is None else positions
    cos_q, sin_q = tables.cos_q[p].unsqueeze(-2), tables.sin_q[p].unsqueeze(-2)  # (…, 1, D)
    cos_k, sin_k = tables.cos_k[p].unsqueeze(-2), tables.sin_k[p].unsqueeze(-2)
    cfg = model.cfg
    B, C, H, KV, D = tokens.shape[0], cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    eps, half = cfg.norm_eps, D // 2
    q_end, k_end, ffn = H * D, (H + KV) * D, cfg.ffn_hidden
    with _threads_for_matmuls_only(tokens.device) as linear:
        x = F.embedding(tokens, model.embed.weight)  # (B, C)
        for weights, (kc, vc) in zip(tables.layers, cache, strict=True):
            if len(weights) == 7:  # a short convolution; its cache kc holds b * x, (B, L, C)
                w_an, w_in, w_conv, w_out, w_mn, w_gu, w_d = weights
                b, c, h = linear(F.rms_norm(x, (C,), w_an, eps), w_in).chunk(3, -1)  # (B, C) each
                kc.select(1, pos).copy_(b * h)
                start = max(pos + 1 - w_conv.shape[1], 0)
                history = kc.narrow(1, start, pos + 1 - start)  # (B, S, C), the last slot is pos
                if mask is not None:  # left padding reads as zeros
                    history = history * (mask[:, 0, 0, start:, None] == 0)
                taps = w_conv[:, w_conv.shape[1] - history.shape[1] :].T  # (S, C)
                x = x + linear(c * (history * taps).sum(1), w_out)
                gate_up = linear(F.rms_norm(x, (C,), w_mn, eps), w_gu)  # (B, 2F)
                x = x + linear(F.silu(gate_up[:, :ffn]) * gate_up[:, ffn:], w_d)
                continue
            w_an, w_qkv, w_qn, w_kn, w_o, w_mn, w_gu, w_d = weights
            qkv = linear(F.rms_norm(x, (C,), w_an, eps), w_qkv)  # (B, (H+2KV)·D)
            q = qkv[:, :q_end].view(B, H, D)
            k = qkv[:, q_end:k_end].view(B, KV, D)
            if w_qn is not None and w_kn is not None:
                q = F.rms_norm(q, (D,), w_qn, eps)
                k = F.rms_norm(k, (D,), w_kn, eps)
            q = torch.addcmul(q * cos_q, q.roll(half, -1), sin_q)  # rotated and scaled (B, H, D)
            kc.select(2, pos).copy_(torch.addcmul(k * cos_k, k.roll(half, -1), sin_k))  # (B, KV, D)
            vc.select(2, pos).copy_(qkv[:, k_end:].view(B, KV, D))
            keys = kc.narrow(2, 0, pos + 1)  # (B, KV, pos+1, D)
            scores = torch.matmul(q.view(B, KV, H // KV, D), keys.transpose(2, 3))  # (B, KV, G, S)
            if mask is not None:
                scores = scores + mask
            y = torch.matmul(torch.softmax(scores, -1), vc.narrow(2, 0, pos + 1))  # (B, KV, G, D)
            x = x + linear(y.view(B, H * D), w_o)
            gate_up = linear(F.rms_norm(x, (C,), w_mn, eps), w_gu)  # (B, 2F)
            x = x + linear(F.silu(gate_up[:, :ffn]) * gate_up[:, ffn:], w_d)
        return linear(F.rms_norm(x, (C,), model.norm.weight, eps), model.head_weight)  # (B, V)
