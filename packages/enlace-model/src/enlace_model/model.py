"""The Enlace decoder-only transformer, top to bottom: norm, rotary, attention, MLP, block, model.

Architecture choices, and why:
- Pre-norm blocks and a final RMSNorm (learned scale, no bias, float32): Llama/Qwen's stable recipe.
  No biases anywhere: nothing measurable at this scale, and the Qwen3/Llama layouts have none.
- Rotary embeddings in Hugging Face's convention (halves, `rotate_half`), so the export renames
  keys and never permutes q/k weights.
- Grouped-query attention (query head h reads kv head h // (n_heads / n_kv_heads)): a smaller KV
  cache and fewer bytes read per generated token.
- QK-norm (per-head RMSNorm of q and k before the rotation, Qwen3's placement): bounds the
  attention logits by gain² √D, which keeps float16 training on the 2060 stable. The gains start
  at `qk_norm_gain_init`: at 1 a small model's attention is too flat to copy (issue 35). Without
  QK-norm the network is Llama's.
- `F.scaled_dot_product_attention` with the backend (`flash`, `mem_efficient`, `math`, `auto`)
  *enforced* by `sdpa_kernel`: a forced backend that cannot run raises `AttentionBackendError`
  instead of falling back. `enable_gqa` works in the flash and math kernels only, so kv heads are
  expanded for `mem_efficient` (the 2060's kernel) and for `auto` on CUDA. The backend is read at
  call time from the model's `attention` attribute: moving the model needs no bookkeeping.
  Packed training rows (chat SFT) run each document's attention causal on its own: no (B, T, T)
  mask to build and read, no work across documents, and CUDA's flash kernel (which takes no
  mask) can serve them; the mask only under torch.compile.
- Decoding one token against the KV cache under `auto`/`math` skips SDPA's dispatch: two small
  matmuls and a softmax, the math kernel's computation (generation.py has the cache and loop).
- Short convolutions (`conv_layers`): LFM2's gated depthwise convolution in place of attention in
  some layers. Each position then carries the bytes just before it, so the attention above can
  match a key of several bytes without first growing a previous-token head (issue 35). The layout
  is Liquid AI's LFM2, which transformers and llama.cpp run (hf.py, gguf_export.py).
- SwiGLU MLP. The LM head is tied to the embedding or separate, by config; tied means no
  `lm_head` parameter at all, so the state dict holds each tensor once.
- Loss: cross-entropy plus z-loss (PaLM) from one fused float32 log_softmax; targets -1 ignored.
- Init: matrices N(0, init_std); o_proj, out_proj and down_proj scaled by 1/sqrt(2·n_layers) so
  the residual stream's variance does not grow with depth (GPT-2); convolution kernels uniform in
  ±1/√kernel (nn.Conv1d's default); norm weights 1, the q/k norms' `qk_norm_gain_init`.

The state-dict keys are a file format (hf.py maps them to Hugging Face's names).
Shapes: B batch, T sequence, C d_model, H query heads, KV key/value heads, D head_dim, V vocab,
L cache length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from enlace_config.schema.model import ModelConfig
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from enlace_model.errors import AttentionBackendError

__all__ = [
    "ATTENTION_BACKENDS",
    "AttentionBackendError",
    "ModelOutput",
    "Transformer",
    "build_model",
    "count_parameters",
    "flops_per_token",
]

ATTENTION_BACKENDS = ("flash", "mem_efficient", "math", "auto")
# What each name allows SDPA to run. "auto" leaves PyTorch's dispatcher free.
_SDPA_BACKENDS: dict[str, list[SDPBackend] | None] = {
    "flash": [SDPBackend.FLASH_ATTENTION],
    "mem_efficient": [SDPBackend.EFFICIENT_ATTENTION],
    "math": [SDPBackend.MATH],
    "auto": None,
}

# A cache for one layer: (keys, values), each (B, KV, L, D), written in place.
LayerCache = tuple[Tensor, Tensor]


@dataclass(slots=True)
class AttentionInputs:
    """What every layer's attention reads in one forward call, built once by the model."""

    cos: Tensor  # rotary tables of these positions: (T, D), or (B, 1, T, D) per sequence
    sin: Tensor
    attention: str  # the SDPA backend (see Transformer.set_attention)
    pos: int = 0  # the cache slot of the first position
    mask: Tensor | None = None  # additive, (B, 1, T, pos+T); None: plain causal
    segments: Tensor | None = None  # (B, T) packed documents' ids (training rows), or None
    spans: list[list[tuple[int, int]]] | None = None  # each row's documents, [start, end)


# --- norm ---------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """RMSNorm with a learned scale, computed in float32 (as Hugging Face's Qwen3RMSNorm)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype in (torch.float32, torch.float64):
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        # Half precision: normalise in float32, scale in the input dtype (Hugging Face's order).
        y = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps).to(x.dtype)
        return self.weight.to(x.dtype) * y


# --- rotary -------------------------------------------------------------------------------------
def rotary_tables(head_dim: int, length: int, theta: float) -> tuple[Tensor, Tensor]:
    """cos and sin for positions 0..length-1, each (length, D), in float32 (Hugging Face layout:
    the D/2 frequencies repeated for the two halves)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = torch.outer(torch.arange(length, dtype=torch.int64).float(), inv_freq)  # (length, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (length, D)
    return emb.cos(), emb.sin()


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, heads, T, D); cos/sin (T, D) shared by the batch or (B, 1, T, D) per sequence."""
    return x * cos + rotate_half(x) * sin


# --- attention ----------------------------------------------------------------------------------
def segment_spans(segments: Tensor) -> list[list[tuple[int, int]]] | None:
    """Each row's runs of one segment id as [start, end) (a packed row: its documents, then its
    padding), or None when an id comes back after another (not a packed row)."""
    spans = []
    for row in segments.tolist():
        starts = [0] + [t for t in range(1, len(row)) if row[t] != row[t - 1]]
        if len(starts) != len(set(row)):
            return None
        spans.append(list(zip(starts, [*starts[1:], len(row)], strict=True)))
    return spans


def single_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """One query position per sequence against a cache: q (B, H, 1, D), k/v (B, KV, L, D), mask
    None or additive (B, 1, 1, L). Returns (B, H, 1, D). The math kernel's computation without
    SDPA's dispatch and without expanding the kv heads."""
    B, H, _, D = q.shape
    KV = k.shape[1]
    # (B, KV, G, D): the G = H/KV query heads that share kv head j are heads j*G .. j*G+G-1.
    qg = q.view(B, KV, H // KV, D) * (1.0 / math.sqrt(D))
    scores = torch.matmul(qg, k.transpose(-1, -2))  # (B, KV, G, L)
    if mask is not None:
        scores = scores + mask
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v).view(B, H, 1, D)  # (B, KV, G, D) → (B, H, 1, D)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.norm_eps) if cfg.qk_norm else None

    def forward(self, x: Tensor, a: AttentionInputs, cache: LayerCache | None = None) -> Tensor:
        B, T, _ = x.shape
        pos, mask = a.pos, a.mask
        q = self.q_proj(x).view(B, T, self.n_heads, self.head_dim)  # (B, T, H, D)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.head_dim)  # (B, T, KV, D)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.head_dim)  # (B, T, KV, D)
        if self.q_norm is not None and self.k_norm is not None:
            q = self.q_norm(q)  # per head, over D, before the rotation
            k = self.k_norm(k)
        q = apply_rotary(q.transpose(1, 2), a.cos, a.sin)  # (B, H, T, D)
        k = apply_rotary(k.transpose(1, 2), a.cos, a.sin)  # (B, KV, T, D)
        v = v.transpose(1, 2)  # (B, KV, T, D)
        if cache is not None:
            k_cache, v_cache = cache  # (B, KV, L, D) each
            k_cache[:, :, pos : pos + T] = k
            v_cache[:, :, pos : pos + T] = v
            k = k_cache[:, :, : pos + T]  # (B, KV, pos+T, D)
            v = v_cache[:, :, : pos + T]
        if T == 1 and cache is not None and a.attention in ("auto", "math"):
            y = single_query_attention(q, k, v, mask)  # (B, H, 1, D)
        elif a.spans is not None:
            y = self._documents(q, k, v, a.spans, a.attention)  # (B, H, T, D)
        else:
            y = self._sdpa(q, k, v, mask, pos == 0 and mask is None, a.attention)  # (B, H, T, D)
        y = y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, H*D)
        return self.o_proj(y)

    def _documents(
        self, q: Tensor, k: Tensor, v: Tensor, spans: list[list[tuple[int, int]]], attention: str
    ) -> Tensor:
        """Packed rows: each document's causal attention on its own, no (T, T) mask. The spans
        of a row cover it, so `split` cuts the documents out: its backward is one `cat`, where
        slicing would add each document's gradient into a zeroed copy of the whole row."""
        rows = []
        for b, row in enumerate(spans):
            lengths = [e - s for s, e in row]
            q_docs, k_docs, v_docs = (t[b : b + 1].split(lengths, dim=2) for t in (q, k, v))
            docs = zip(q_docs, k_docs, v_docs, strict=True)
            parts = [self._sdpa(qd, kd, vd, None, True, attention) for qd, kd, vd in docs]
            rows.append(torch.cat(parts, dim=2))
        return torch.cat(rows)

    def _sdpa(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, causal: bool, attention: str
    ) -> Tensor:
        gqa = self.n_kv_heads != self.n_heads
        # auto expands on CUDA too, so that every fused kernel is eligible.
        if gqa and (attention == "mem_efficient" or (attention == "auto" and q.is_cuda)):
            # The memory-efficient kernel ignores enable_gqa: give it one kv head per query head.
            k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)  # (B, H, L, D)
            v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
            gqa = False
        if mask is not None and mask.dtype != q.dtype:
            mask = mask.to(q.dtype)
        try:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa
            )
        except RuntimeError as e:
            message = str(e).lower()
            no_kernel = "no available kernel" in message or "no viable backend" in message
            if attention == "auto" or not no_kernel:
                raise
            dtype = str(q.dtype).removeprefix("torch.")
            raise AttentionBackendError(
                f"attention backend '{attention}' cannot run here (device {q.device.type}, "
                f"dtype {dtype}, head_dim {self.head_dim}): {str(e).rstrip('.')}. "
                f"Choose another one with hardware.attention (or attention= when loading): "
                f"'math' runs everywhere, 'auto' lets PyTorch pick; flash needs a CPU or an "
                f"Ampere+ GPU in float16/bfloat16, mem_efficient needs a CUDA GPU."
            ) from e


# --- short convolution --------------------------------------------------------------------------
class ShortConv(nn.Module):
    """LFM2's gated short convolution (transformers' Lfm2ShortConv, llama.cpp's `shortconv`):
    in_proj to b, c, x; y = out_proj(c * conv(b * x)), the convolution causal and depthwise over
    the position and the kernel - 1 before it.

    Packed rows: a position never reads an earlier document's bytes (the segment ids mask the
    shifted terms). Cached decoding: the cache holds b * x of every slot, (B, L, C), as the KV cache
    holds keys; slots the mask hides (left padding) count as zeros, as transformers zeroes padding."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.kernel = cfg.conv_kernel
        self.in_proj = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        # (C, 1, K): nn.Conv1d's depthwise layout, as Hugging Face stores it (3-D, so the
        # optimizer gives it AdamW, not Muon, whose orthogonalisation is for matrices).
        self.conv_weight = nn.Parameter(torch.empty(cfg.d_model, 1, cfg.conv_kernel))
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: Tensor, a: AttentionInputs, cache: LayerCache | None = None) -> Tensor:
        T, K = x.shape[1], self.kernel
        b, c, h = self.in_proj(x).chunk(3, dim=-1)  # (B, T, C) each
        u = b * h
        w = self.conv_weight[:, 0]  # (C, K): w[:, K-1] multiplies the position itself
        if cache is None:
            y = u * w[:, K - 1]
            for shift in range(1, min(K, T)):
                earlier = F.pad(u[:, :-shift], (0, 0, shift, 0))  # earlier[t] = u[t - shift]
                if a.segments is not None:
                    same = a.segments[:, shift:] == a.segments[:, :-shift]  # (B, T - shift)
                    earlier = earlier * F.pad(same, (shift, 0)).unsqueeze(-1).to(u.dtype)
                y = y + earlier * w[:, K - 1 - shift]
        else:
            slots, pos = cache[0], a.pos  # (B, L, C)
            slots[:, pos : pos + T] = u
            start = max(pos - (K - 1), 0)
            history = slots[:, start : pos + T]  # (B, S, C)
            if a.mask is not None:  # the last query sees exactly the real slots
                real = a.mask[:, 0, -1, start : pos + T] == 0  # (B, S)
                history = history * real.unsqueeze(-1).to(u.dtype)
            history = F.pad(history, (0, 0, K - 1 - (pos - start), 0))  # (B, K-1+T, C)
            y = sum(history[:, i : i + T] * w[:, i] for i in range(K))
        return self.out_proj(c * y)


# --- MLP ----------------------------------------------------------------------------------------
class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.up_proj = nn.Linear(cfg.d_model, cfg.ffn_hidden, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_hidden, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


# --- block --------------------------------------------------------------------------------------
class Block(nn.Module):
    """A pre-norm block whose token mixer is attention, or the short convolution (`conv_layers`);
    `attn_norm` is the mixer's norm either way (LFM2's `operator_norm`)."""

    def __init__(self, cfg: ModelConfig, conv: bool = False) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        # One of the two, under its own name: the state-dict keys are a file format.
        self.attn = None if conv else Attention(cfg)
        self.conv = ShortConv(cfg) if conv else None
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: Tensor, a: AttentionInputs, cache: LayerCache | None = None) -> Tensor:
        mixer = self.attn if self.attn is not None else self.conv
        assert mixer is not None
        x = x + mixer(self.attn_norm(x), a, cache)
        return x + self.mlp(self.mlp_norm(x))


# --- model --------------------------------------------------------------------------------------
@dataclass
class ModelOutput:
    """logits (B, T, V); with targets: loss = ce_loss + z_loss (z_loss already weighted)."""

    logits: Tensor
    loss: Tensor | None = None
    ce_loss: Tensor | None = None
    z_loss: Tensor | None = None


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, *, attention: str = "auto") -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i in cfg.conv_layers) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = (
            None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        )
        # Rotary tables for the whole context; derived from the config, so not in the state dict.
        cos, sin = rotary_tables(cfg.head_dim, cfg.context_length, cfg.rope_theta)
        self.rope_cos: Tensor
        self.rope_sin: Tensor
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.set_attention(attention)  # the SDPA backend, read at call time
        self.init_weights()

    # --- set-up ---------------------------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self) -> None:
        """The documented initialisation (see the module docstring); also rebuilds the rotary
        tables, so a model materialised from the meta device (`to_empty`) is complete."""
        std = self.cfg.init_std
        res = std / math.sqrt(2 * self.cfg.n_layers)
        nn.init.normal_(self.embed.weight, mean=0.0, std=std)
        for layer in self.layers:
            assert isinstance(layer, Block)
            a, c, m = layer.attn, layer.conv, layer.mlp
            # in this order: the weights drawn depend on it
            mixer = ((a.q_proj, std), (a.k_proj, std), (a.v_proj, std), (a.o_proj, res)) if a else (
                (c.in_proj, std), (c.out_proj, res)) if c else ()  # fmt: skip
            for lin, s in (*mixer, (m.gate_proj, std), (m.up_proj, std), (m.down_proj, res)):
                nn.init.normal_(lin.weight, mean=0.0, std=s)
            if c is not None:  # nn.Conv1d's own default: uniform within ±1/√kernel
                nn.init.uniform_(c.conv_weight, -1 / math.sqrt(c.kernel), 1 / math.sqrt(c.kernel))
        for module in self.modules():
            if isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        for layer in self.layers:
            assert isinstance(layer, Block)
            if layer.attn is None:
                continue
            for norm in (layer.attn.q_norm, layer.attn.k_norm):
                if norm is not None:  # the logits' bound is gain² √D (see the docstring)
                    nn.init.constant_(norm.weight, self.cfg.qk_norm_gain_init)
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, mean=0.0, std=std)
        self.reset_rotary()

    @torch.no_grad()
    def reset_rotary(self) -> None:
        """Recompute the rotary tables (after `to_empty`, which leaves buffers uninitialised)."""
        cos, sin = rotary_tables(self.cfg.head_dim, self.cfg.context_length, self.cfg.rope_theta)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)

    def set_attention(self, name: str) -> None:
        """Choose the SDPA backend: "flash", "mem_efficient", "math" or "auto" (enforced)."""
        if name not in _SDPA_BACKENDS:
            raise AttentionBackendError(
                f"unknown attention backend {name!r}; choose one of {', '.join(ATTENTION_BACKENDS)}"
            )
        self.attention = name

    def _sdpa_context(self) -> AbstractContextManager[object]:
        backends = _SDPA_BACKENDS[self.attention]
        return nullcontext() if backends is None else sdpa_kernel(backends)

    @property
    def head_weight(self) -> Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def new_cache(self, batch: int, length: int) -> list[LayerCache]:
        """An empty cache of `length` slots per sequence, one entry per layer: keys and values
        (B, KV, L, D) each for attention; b * x (B, L, C) for a short convolution (its second
        tensor unused), zeroed, as a convolution reads the slots before the first position."""
        c, weight = self.cfg, self.embed.weight
        kv = partial(torch.empty, (batch, c.n_kv_heads, length, c.head_dim), device=weight.device,
                     dtype=weight.dtype)  # fmt: skip
        conv = partial(torch.zeros, (batch, length, c.d_model), device=weight.device,
                       dtype=weight.dtype)  # fmt: skip
        return [
            (conv(), weight.new_empty(0)) if i in c.conv_layers else (kv(), kv())
            for i in range(c.n_layers)
        ]

    # --- forward --------------------------------------------------------------------------------
    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        segments: Tensor | None = None,
        weights: Tensor | None = None,
        *,
        z_loss_weight: float = 0.0,
    ) -> ModelOutput:
        """idx (B, T) token ids; targets (B, T) with -1 for ignored positions; segments (B, T):
        packed rows of several documents (chat SFT), a position attends only to earlier positions
        of its own segment id (block-diagonal causal mask; rotary is relative, so a document's
        offset in the row does not matter); weights (B, T): each target's weight in the loss
        trained on (`lm_loss`)."""
        T = idx.shape[1]
        if idx.shape[1] > self.cfg.context_length:
            raise ValueError(
                f"sequence length {T} exceeds context_length {self.cfg.context_length}"
            )
        x = self.embed(idx)  # (B, T, C)
        cos, sin = self.rope_cos[:T].to(x.dtype), self.rope_sin[:T].to(x.dtype)  # (T, D)
        mask, spans = None, None
        if segments is not None:
            # Each document's own causal attention: no (B, T, T) mask, no work across documents
            # (the CPU SFT's step 1.73 times faster, benchmarks/bench_packed_attention.py).
            # Under torch.compile (or with an id that comes back after another) the block-diagonal
            # mask instead: each row's layout would otherwise recompile the graph.
            if not torch.compiler.is_compiling():
                spans = segment_spans(segments)
            if spans is None:
                causal = torch.ones(T, T, dtype=torch.bool, device=idx.device).tril()  # (T, T)
                allowed = (segments[:, :, None] == segments[:, None, :]) & causal  # (B, T, T)
                mask = torch.zeros(allowed.shape, dtype=x.dtype, device=idx.device)
                mask = mask.masked_fill_(~allowed, float("-inf")).unsqueeze(1)  # (B, 1, T, T)
        a = AttentionInputs(cos, sin, self.attention, 0, mask, segments, spans)
        with self._sdpa_context():
            for layer in self.layers:
                x = layer(x, a)
        logits = F.linear(self.norm(x), self.head_weight)  # (B, T, V)
        if targets is None:
            return ModelOutput(logits=logits)
        ce_loss, z_loss, trained = lm_loss(logits, targets, z_loss_weight, weights)
        return ModelOutput(logits=logits, loss=trained + z_loss, ce_loss=ce_loss, z_loss=z_loss)

    def forward_cached(
        self,
        idx: Tensor,
        cache: Sequence[LayerCache],
        pos: int,
        positions: Tensor | None = None,
        mask: Tensor | None = None,
    ) -> Tensor:
        """The generation step: run idx (B, T) at cache slots pos..pos+T-1, writing their keys and
        values into `cache`, and return the logits of the last position (B, V).

        positions (B, T): rotary positions per sequence (left-padded batches), default pos..pos+T-1.
        mask: additive, (B, 1, T, pos+T), -inf where a key must not be seen (padding, future); None
        means plain causal attention."""
        T = idx.shape[1]
        x = self.embed(idx)  # (B, T, C)
        if positions is None:
            cos = self.rope_cos[pos : pos + T].to(x.dtype)  # (T, D)
            sin = self.rope_sin[pos : pos + T].to(x.dtype)
        else:
            cos = self.rope_cos[positions].to(x.dtype).unsqueeze(1)  # (B, 1, T, D)
            sin = self.rope_sin[positions].to(x.dtype).unsqueeze(1)
        a = AttentionInputs(cos, sin, self.attention, pos, mask)
        with self._sdpa_context():
            for layer, layer_cache in zip(self.layers, cache, strict=True):
                x = layer(x, a, layer_cache)
        return F.linear(self.norm(x[:, -1]), self.head_weight)  # (B, V)


def lm_loss(
    logits: Tensor, targets: Tensor, z_loss_weight: float, weights: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Cross-entropy, weighted z-loss and the cross-entropy trained on, means over positions whose
    target is not -1, in float32. The last is the first with each position's cross-entropy times
    its `weights` (chat copies weighing more: data.copied_weight), still divided by the count of
    positions, so the logged cross-entropy stays the plain mean; without weights it is the first.

    One fused log_softmax serves both (its backward is PyTorch's fused kernel): the target's
    log-probability gives the cross-entropy, and logsumexp = logit - log_softmax at the same index
    gives the z-loss without a second pass over the vocabulary. An all-ignored batch gives zeros,
    not NaN."""
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    keep = targets != -1  # (B, T)
    index = targets.clamp(min=0).unsqueeze(-1)  # (B, T, 1)
    target_logprob = F.log_softmax(logits, dim=-1).gather(-1, index).squeeze(-1)  # (B, T)
    count = keep.sum().clamp(min=1)
    ce_loss = -torch.where(keep, target_logprob, 0.0).sum() / count
    if z_loss_weight:
        lse = logits.gather(-1, index).squeeze(-1) - target_logprob  # (B, T)
        z_loss = z_loss_weight * torch.where(keep, lse.square(), 0.0).sum() / count
    else:
        z_loss = torch.zeros((), dtype=ce_loss.dtype, device=ce_loss.device)
    if weights is None:
        return ce_loss, z_loss, ce_loss
    trained = -torch.where(keep, target_logprob * weights.float(), 0.0).sum() / count
    return ce_loss, z_loss, trained


def build_model(cfg: ModelConfig, *, attention: str = "auto") -> Transformer:
    """An initialised model (float32, CPU). Seed torch beforehand for reproducible weights."""
    return Transformer(cfg, attention=attention)


# --- accounting ---------------------------------------------------------------------------------
def count_parameters(
    model_or_cfg: Transformer | ModelConfig, include_embeddings: bool = True
) -> int:
    """Parameters, each tensor once. Without embeddings: minus the token-embedding table (a
    lookup, no FLOPs); an untied LM head is a matmul and stays counted."""
    if isinstance(model_or_cfg, Transformer):
        total = sum(p.numel() for p in model_or_cfg.parameters())
        return total - (0 if include_embeddings else model_or_cfg.embed.weight.numel())
    c = model_or_cfg
    attn = c.d_model * c.head_dim * (2 * c.n_heads + 2 * c.n_kv_heads)
    attn += 2 * c.head_dim if c.qk_norm else 0
    conv = 4 * c.d_model * c.d_model + c.d_model * c.conv_kernel  # in_proj 3C x C, out_proj, kernel
    n_conv = len(c.conv_layers)
    per_layer = 3 * c.d_model * c.ffn_hidden + 2 * c.d_model
    head = 0 if c.tie_embeddings else c.vocab_size * c.d_model
    embed = c.vocab_size * c.d_model
    mixers = (c.n_layers - n_conv) * attn + n_conv * conv
    total = embed + c.n_layers * per_layer + mixers + c.d_model + head
    return total - (0 if include_embeddings else embed)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs (forward + backward) per token at sequence length seq_len: 6·N over the
    parameters used as matmuls (everything but the embedding lookup; the LM head counted even when
    tied) plus the attention scores and values, 12·n_layers·n_heads·head_dim·seq_len (PaLM's
    formula, which does not halve for the causal mask) over the attention layers only (a short
    convolution's few multiply-adds per channel are left out, as the norms are)."""
    n = count_parameters(cfg, include_embeddings=False)
    if cfg.tie_embeddings:
        n += cfg.vocab_size * cfg.d_model
    attention_layers = cfg.n_layers - len(cfg.conv_layers)
    return 6.0 * n + 12.0 * attention_layers * cfg.n_heads * cfg.head_dim * seq_len
