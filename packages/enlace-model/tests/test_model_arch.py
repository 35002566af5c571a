"""The architecture: shapes, causality, a plain reference implementation, GQA, rotary, QK-norm,
the loss, the attention backends (including the 2060's kv-expansion path), init and key names."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from enlace_config import load_config
from enlace_config.schema.model import ModelConfig
from enlace_model import (
    AttentionBackendError,
    build_model,
    count_parameters,
    flops_per_token,
)
from enlace_model import model as model_module
from enlace_model.model import AttentionInputs, apply_rotary, rotary_tables
from torch.nn.attention import SDPBackend

TINY_50M = Path(__file__).resolve().parents[3] / "configs" / "model" / "tiny-50m.yaml"


# --- a plain reference, written independently of model.py ----------------------------------------
def reference_forward(model, idx):
    """Loops and explicit formulas: RMSNorm, rotate-half RoPE, per-head QK-norm before rotation,
    kv head h // group for query head h, causal softmax, SwiGLU."""
    cfg = model.cfg
    sd = {k: v.double() for k, v in model.state_dict().items()}
    H, KV, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    B, T = idx.shape

    def rms(x, w):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * w

    inv = [1.0 / cfg.rope_theta ** (2 * j / D) for j in range(D // 2)]
    ang = torch.tensor([[t * f for f in inv] for t in range(T)], dtype=torch.float64)  # (T, D/2)
    cos, sin = ang.cos(), ang.sin()

    def rope(x):  # (T, D)
        a, b = x[:, : D // 2], x[:, D // 2 :]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

    x = sd["embed.weight"][idx]  # (B, T, C)
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        h = rms(x, sd[p + "attn_norm.weight"])
        if i in cfg.conv_layers:  # LFM2: y_t = sum_j w_j * (b * x)_{t-K+1+j}, then c * y
            bb, cc, xx = (h @ sd[p + "conv.in_proj.weight"].T).chunk(3, dim=-1)
            u, w, K = bb * xx, sd[p + "conv.conv_weight"][:, 0], cfg.conv_kernel  # w (C, K)
            y = torch.zeros_like(u)
            for t in range(T):
                for j in range(K):
                    if t - K + 1 + j >= 0:
                        y[:, t] += w[:, j] * u[:, t - K + 1 + j]
            x = x + (cc * y) @ sd[p + "conv.out_proj.weight"].T
            h = rms(x, sd[p + "mlp_norm.weight"])
            x = (
                x
                + (
                    F.silu(h @ sd[p + "mlp.gate_proj.weight"].T)
                    * (h @ sd[p + "mlp.up_proj.weight"].T)
                )
                @ sd[p + "mlp.down_proj.weight"].T
            )
            continue
        q = (h @ sd[p + "attn.q_proj.weight"].T).view(B, T, H, D)
        k = (h @ sd[p + "attn.k_proj.weight"].T).view(B, T, KV, D)
        v = (h @ sd[p + "attn.v_proj.weight"].T).view(B, T, KV, D)
        out = torch.zeros(B, T, H, D, dtype=torch.float64)
        for b in range(B):
            for head in range(H):
                g = head // (H // KV)
                qh, kh = q[b, :, head], k[b, :, g]
                if cfg.qk_norm:
                    qh = rms(qh, sd[p + "attn.q_norm.weight"])
                    kh = rms(kh, sd[p + "attn.k_norm.weight"])
                qh, kh = rope(qh), rope(kh)
                scores = qh @ kh.T / math.sqrt(D)
                scores = scores.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
                out[b, :, head] = scores.softmax(-1) @ v[b, :, g]
        x = x + out.reshape(B, T, H * D) @ sd[p + "attn.o_proj.weight"].T
        h = rms(x, sd[p + "mlp_norm.weight"])
        gate = h @ sd[p + "mlp.gate_proj.weight"].T
        up = h @ sd[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ sd[p + "mlp.down_proj.weight"].T
    x = rms(x, sd["norm.weight"])
    head = sd["embed.weight"] if cfg.tie_embeddings else sd["lm_head.weight"]
    return x @ head.T


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # GQA 4/2 with QK-norm, tied
        {"n_kv_heads": 4},  # MHA
        {"n_kv_heads": 1},  # MQA
        {"qk_norm": False, "tie_embeddings": False},
        {"conv_layers": [0], "conv_kernel": 4, "n_layers": 3},  # LFM2: convolution, attention
    ],
    ids=["gqa", "mha", "mqa", "plain-untied", "conv"],
)
def test_matches_plain_reference(tiny_config, perturb_norms, overrides):
    model = build_model(tiny_config(**overrides)).double()
    perturb_norms(model)
    idx = torch.randint(0, 64, (2, 12))
    got = model(idx).logits
    # Tolerance: the rotary tables are computed in float32 (as Hugging Face does), the reference
    # in float64; any structural error is orders of magnitude larger.
    torch.testing.assert_close(got, reference_forward(model, idx), rtol=1e-5, atol=1e-6)


def test_shapes_and_loss_parts(cfg):
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (3, 10))
    out = model(idx)
    assert out.logits.shape == (3, 10, cfg.vocab_size)
    assert out.loss is None and out.ce_loss is None and out.z_loss is None
    out = model(idx, idx, z_loss_weight=1e-3)
    assert out.loss is not None and out.loss.shape == ()
    torch.testing.assert_close(out.loss, out.ce_loss + out.z_loss)
    out.loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with pytest.raises(ValueError, match="context_length"):
        model(torch.zeros(1, cfg.context_length + 1, dtype=torch.long))


def test_causality(cfg):
    model = build_model(cfg)
    idx = torch.randint(0, cfg.vocab_size, (2, 16))
    base = model(idx).logits
    for t in (0, 7, 15):
        changed = idx.clone()
        changed[:, t] = (changed[:, t] + 1) % cfg.vocab_size
        logits = model(changed).logits
        torch.testing.assert_close(logits[:, :t], base[:, :t], rtol=0, atol=0)
        assert not torch.allclose(logits[:, t:], base[:, t:])


def test_gqa_with_all_kv_heads_equals_multi_head_attention(tiny_config):
    """n_kv_heads = n_heads takes the same code as GQA; against torch's own MHA kernel."""
    model = build_model(tiny_config(n_kv_heads=4, qk_norm=False, n_layers=1)).double()
    attn = model.layers[0].attn
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    cos, sin = model.rope_cos[:9], model.rope_sin[:9]
    got = attn(x, AttentionInputs(cos, sin, "math"))
    q = apply_rotary((x @ attn.q_proj.weight.T).view(2, 9, 4, 8).transpose(1, 2), cos, sin)
    k = apply_rotary((x @ attn.k_proj.weight.T).view(2, 9, 4, 8).transpose(1, 2), cos, sin)
    v = (x @ attn.v_proj.weight.T).view(2, 9, 4, 8).transpose(1, 2)
    mha = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # one kv head per query head
    want = mha.transpose(1, 2).reshape(2, 9, 32) @ attn.o_proj.weight.T
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_rotary_scores_depend_only_on_relative_position():
    D = 16
    cos, sin = rotary_tables(D, 64, 10000.0)
    q, k = torch.randn(D), torch.randn(D)

    def score(m, n):
        qm = apply_rotary(q.view(1, 1, 1, D), cos[m : m + 1], sin[m : m + 1])
        kn = apply_rotary(k.view(1, 1, 1, D), cos[n : n + 1], sin[n : n + 1])
        return float((qm * kn).sum())

    for m, n, shift in [(5, 2, 10), (0, 0, 33), (20, 3, 17)]:
        assert score(m, n) == pytest.approx(score(m + shift, n + shift), rel=1e-4, abs=1e-5)
    assert score(5, 2) != pytest.approx(score(5, 4), rel=1e-3)
    # Position 0 is the identity; rotation keeps norms.
    x = torch.randn(1, 1, 1, D)
    torch.testing.assert_close(apply_rotary(x, cos[:1], sin[:1]), x)
    assert apply_rotary(x, cos[9:10], sin[9:10]).norm() == pytest.approx(float(x.norm()), rel=1e-5)


def test_qk_norm_present_and_effective(tiny_config):
    with_norm = build_model(tiny_config())
    without = build_model(tiny_config(qk_norm=False))
    keys = set(with_norm.state_dict())
    assert {"layers.0.attn.q_norm.weight", "layers.0.attn.k_norm.weight"} <= keys
    assert not any("q_norm" in k or "k_norm" in k for k in without.state_dict())
    idx = torch.randint(0, 64, (1, 10))
    for model, invariant in ((with_norm, True), (without, False)):
        base = model(idx).logits
        with torch.no_grad():  # scaling q and k changes nothing when they are normalised
            for layer in model.layers:
                layer.attn.q_proj.weight.mul_(7.0)
                layer.attn.k_proj.weight.mul_(3.0)
        assert torch.allclose(model(idx).logits, base, atol=1e-5) == invariant
    with torch.no_grad():  # and the learned per-dimension weight is applied
        with_norm.layers[0].attn.q_norm.weight[:4].fill_(3.0)
    assert not torch.allclose(with_norm(idx).logits, base, atol=1e-4)


def test_loss_by_hand_with_ignored_positions(cfg):
    model = build_model(cfg).double()
    idx = torch.randint(0, cfg.vocab_size, (2, 8))
    targets = torch.randint(0, cfg.vocab_size, (2, 8))
    targets[0, :3] = -1
    targets[1, 6:] = -1
    w = 0.01
    out = model(idx, targets, z_loss_weight=w)
    logits = out.logits
    keep = targets != -1
    lse = torch.log(torch.exp(logits).sum(-1))  # (B, T)
    picked = logits.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    ce = (lse - picked)[keep].mean()
    z = w * (lse[keep] ** 2).mean()
    torch.testing.assert_close(out.ce_loss, ce)
    torch.testing.assert_close(out.z_loss, z)
    torch.testing.assert_close(out.loss, ce + z)
    torch.testing.assert_close(
        out.ce_loss,
        F.cross_entropy(logits.view(-1, cfg.vocab_size), targets.view(-1), ignore_index=-1),
    )
    assert float(model(idx, targets).z_loss) == 0.0
    none = model(idx, torch.full_like(targets, -1), z_loss_weight=w)
    assert float(none.loss.detach()) == 0.0  # an all-padding batch is 0, not NaN


def test_weighted_loss_trains_on_the_weights_and_logs_the_plain_mean(cfg):
    """weights (chat copies weighing more): the loss trained on is the per-position cross-entropy
    times its weight over the count of trained positions; ce_loss stays the plain mean (the log's
    loss, comparable across weights); weights of 1 change nothing, and the gradient of a position
    weighing 3 is three times its unweighted one."""
    model = build_model(cfg).double()
    idx = torch.randint(0, cfg.vocab_size, (2, 8))
    targets = torch.randint(0, cfg.vocab_size, (2, 8))
    targets[0, :3] = -1
    weights = torch.ones(2, 8, dtype=torch.float32)
    weights[1, 2:4] = 3.0
    out = model(idx, targets, None, weights)
    nll = -torch.log_softmax(out.logits, -1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    keep = targets != -1
    torch.testing.assert_close(out.ce_loss, nll[keep].mean())
    torch.testing.assert_close(out.loss, (nll * weights)[keep].sum() / keep.sum())
    plain = model(idx, targets)
    torch.testing.assert_close(model(idx, targets, None, torch.ones(2, 8)).loss, plain.loss)
    logits = out.logits.detach().requires_grad_()
    from enlace_model.model import lm_loss

    lm_loss(logits, targets, 0.0, weights)[2].backward()
    weighted = logits.grad.clone()
    logits.grad = None
    lm_loss(logits, targets, 0.0)[2].backward()
    torch.testing.assert_close(weighted[1, 2:4], 3 * logits.grad[1, 2:4])
    torch.testing.assert_close(weighted[0], logits.grad[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cpu_backends_agree(tiny_config, dtype):
    model = build_model(tiny_config()).to(dtype)
    idx = torch.randint(0, 64, (2, 16))
    targets = torch.randint(0, 64, (2, 16))
    results = {}
    for name in ("math", "flash", "auto"):
        model.set_attention(name)
        model.zero_grad()
        out = model(idx, targets)
        out.loss.backward()
        results[name] = (out.logits.detach(), model.layers[0].attn.q_proj.weight.grad.clone())
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for name in ("flash", "auto"):
        torch.testing.assert_close(results[name][0], results["math"][0], rtol=tol, atol=tol)
        torch.testing.assert_close(results[name][1], results["math"][1], rtol=tol, atol=tol)


def test_forced_backend_that_cannot_run_raises_clearly(cfg):
    model = build_model(cfg, attention="mem_efficient")  # no CPU kernel
    with pytest.raises(AttentionBackendError, match=r"'mem_efficient' cannot run here.*'math'"):
        model(torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(AttentionBackendError, match="unknown attention backend 'fast'"):
        model.set_attention("fast")


def test_backend_is_enforced(cfg, monkeypatch):
    """Under a forced backend SDPA sees only that backend enabled (checked inside the call)."""
    seen = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(
            (
                torch.backends.cuda.flash_sdp_enabled(),
                torch.backends.cuda.math_sdp_enabled(),
                torch.backends.cuda.mem_efficient_sdp_enabled(),
            )
        )
        return real(*args, **kwargs)

    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", spy)
    model = build_model(cfg, attention="math")
    model(torch.zeros(1, 4, dtype=torch.long))
    model.set_attention("flash")
    model(torch.zeros(1, 4, dtype=torch.long))
    assert seen[0] == (False, True, False)
    assert seen[-1] == (True, False, False)


def test_2060_path_expands_kv_heads_and_matches(tiny_config, monkeypatch):
    """The mem_efficient path (kv heads expanded, no enable_gqa), run on CPU through the math
    kernel, gives what the GQA math path gives."""
    model = build_model(tiny_config(n_heads=4, n_kv_heads=2))
    idx = torch.randint(0, 64, (2, 12))
    model.set_attention("math")
    want = model(idx).logits
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        calls.append((q.shape[1], k.shape[1], v.shape[1], kwargs.get("enable_gqa")))
        return real(q, k, v, **kwargs)

    monkeypatch.setitem(model_module._SDPA_BACKENDS, "mem_efficient", [SDPBackend.MATH])
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", spy)
    model.set_attention("mem_efficient")
    got = model(idx).logits
    assert calls and all(c == (4, 4, 4, False) for c in calls)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["mem_efficient", "flash", "auto"])
def test_gpu_fused_kernels_match_math(tiny_config, backend):
    model = build_model(tiny_config(d_model=256, n_heads=4, n_kv_heads=2)).cuda().half()
    idx = torch.randint(0, 64, (2, 32), device="cuda")
    model.set_attention("math")
    want = model(idx).logits.float()
    model.set_attention(backend)
    if backend == "flash" and torch.cuda.get_device_capability() < (8, 0):
        with pytest.raises(AttentionBackendError):
            model(idx)
        return
    got = model(idx).logits.float()
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_initialisation_is_the_documented_one(tiny_config):
    cfg = tiny_config(d_model=128, n_heads=4, n_kv_heads=2, ffn_hidden=384, n_layers=8)
    model = build_model(cfg)
    resid = cfg.init_std / math.sqrt(2 * cfg.n_layers)
    for name, param in model.named_parameters():
        p = param.detach()
        if "norm" in name:
            assert bool((p == 1).all()), name
            continue
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            assert float(p.std()) == pytest.approx(resid, rel=0.1), name
        else:
            assert float(p.std()) == pytest.approx(cfg.init_std, rel=0.1), name
        assert abs(float(p.mean())) < 0.01
    assert not any("bias" in name for name, _ in model.named_parameters())


def test_state_dict_key_names_are_stable(tiny_config):
    """The keys are the checkpoint file format: changing them breaks every saved model."""
    keys = list(build_model(tiny_config(n_layers=1, tie_embeddings=False)).state_dict())
    assert keys == [
        "embed.weight",
        "layers.0.attn_norm.weight",
        "layers.0.attn.q_proj.weight",
        "layers.0.attn.k_proj.weight",
        "layers.0.attn.v_proj.weight",
        "layers.0.attn.o_proj.weight",
        "layers.0.attn.q_norm.weight",
        "layers.0.attn.k_norm.weight",
        "layers.0.mlp_norm.weight",
        "layers.0.mlp.gate_proj.weight",
        "layers.0.mlp.up_proj.weight",
        "layers.0.mlp.down_proj.weight",
        "norm.weight",
        "lm_head.weight",
    ]
    tied = build_model(tiny_config(n_layers=1))
    assert "lm_head.weight" not in tied.state_dict()


@pytest.mark.parametrize(
    "overrides",
    [{}, {"tie_embeddings": False}, {"qk_norm": False}, {"conv_layers": [1], "conv_kernel": 4}],
)
def test_parameter_count_and_flops(tiny_config, overrides):
    cfg = tiny_config(**overrides)
    model = build_model(cfg)
    total = sum(p.numel() for p in model.parameters())
    assert count_parameters(model) == count_parameters(cfg) == total
    no_embed = total - cfg.vocab_size * cfg.d_model
    assert count_parameters(model, include_embeddings=False) == no_embed
    assert count_parameters(cfg, include_embeddings=False) == no_embed
    matmul_params = no_embed + (cfg.vocab_size * cfg.d_model if cfg.tie_embeddings else 0)
    attn = 12 * (cfg.n_layers - len(cfg.conv_layers)) * cfg.d_model * 100
    assert flops_per_token(cfg, 100) == 6 * matmul_params + attn


def test_tiny_50m_shape_has_the_expected_size():
    """configs/model/tiny-50m.yaml, the shape the benchmarks compare at: about 41 M parameters."""
    cfg = load_config(TINY_50M, schema=ModelConfig).config
    C, F, V = cfg.d_model, cfg.ffn_hidden, cfg.vocab_size
    attn = C * cfg.head_dim * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)
    per_layer = attn + 2 * cfg.head_dim + 3 * C * F + 2 * C  # + QK-norm, SwiGLU, two norms
    assert cfg.tie_embeddings and cfg.qk_norm
    assert count_parameters(cfg) == V * C + cfg.n_layers * per_layer + C
    assert 40e6 < count_parameters(cfg) < 42e6


@pytest.mark.parametrize("overrides", [{}, {"conv_layers": [0]}], ids=["attention", "conv"])
def test_segments_keep_packed_documents_apart(tiny_config, overrides):
    """A row packing three documents (segment ids) gives each the logits and loss it gets alone:
    no document attends to another (nor, in a convolution, reads its last bytes), and rotary
    makes the offset in the row irrelevant."""
    cfg = tiny_config(**overrides)
    model = build_model(cfg).double().eval()
    docs = [torch.randint(0, cfg.vocab_size, (n,)) for n in (5, 9, 4)]
    row = torch.cat(docs).unsqueeze(0)  # (1, 18)
    segments = torch.cat([torch.full((len(d),), i) for i, d in enumerate(docs)]).unsqueeze(0)
    with torch.no_grad():
        packed = model(row, segments=segments).logits[0]
        alone = torch.cat([model(d.unsqueeze(0)).logits[0] for d in docs])
        mixed = model(row).logits[0]  # without segments: later documents see earlier ones
    torch.testing.assert_close(packed, alone, rtol=1e-6, atol=1e-7)  # float32 rotary tables
    assert not torch.allclose(mixed[5:], alone[5:])


def test_packed_rows_attend_document_by_document_without_a_mask(tiny_config, monkeypatch):
    """Training rows of packed conversations run each document's attention causal on its own:
    plain causal SDPA, no (B, T, T) mask (with it the CPU SFT's step at 3,072 positions took 1.73
    times as long), the documents of every row apart, padding included."""
    cfg = tiny_config()
    model = build_model(cfg).double().eval()
    calls = []
    sdpa = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, is_causal=False, **kw):
        calls.append((q.shape[2], attn_mask, is_causal))
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)

    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", recording)
    row = torch.randint(0, cfg.vocab_size, (2, 12))
    segments = torch.tensor([[0] * 5 + [1] * 4 + [2] * 3, [0] * 9 + [1] * 3])
    with torch.no_grad():
        packed = model(row, segments=segments).logits
    assert calls and all(mask is None and causal for _, mask, causal in calls)
    assert sorted({n for n, _, _ in calls}) == [3, 4, 5, 9]  # the documents' lengths
    with torch.no_grad():
        for r, pieces in ((0, [(0, 5), (5, 9), (9, 12)]), (1, [(0, 9), (9, 12)])):
            for s, e in pieces:
                alone = model(row[r : r + 1, s:e]).logits[0]
                torch.testing.assert_close(packed[r, s:e], alone, rtol=1e-6, atol=1e-7)


def test_packed_rows_train_as_the_block_diagonal_mask_does(tiny_config, monkeypatch):
    """The document-by-document attention gives the block-diagonal mask's loss and gradients
    (the mask is what torch.compile traces, and what an id coming back after another gets)."""
    cfg = tiny_config(conv_layers=[0])
    row = torch.randint(0, cfg.vocab_size, (2, 12))
    segments = torch.tensor([[0] * 5 + [1] * 4 + [2] * 3, [0] * 9 + [1] * 3])

    def loss_and_grads(model):
        out = model(row, row.roll(-1, 1), segments)
        out.loss.backward()
        return out.loss.detach(), [p.grad.clone() for p in model.parameters()]

    torch.manual_seed(0)
    model = build_model(cfg).double()
    spans_loss, spans_grads = loss_and_grads(model)
    model.zero_grad()
    monkeypatch.setattr(model_module, "segment_spans", lambda segments: None)
    mask_loss, mask_grads = loss_and_grads(model)
    torch.testing.assert_close(spans_loss, mask_loss)
    for a, b in zip(spans_grads, mask_grads, strict=True):
        torch.testing.assert_close(a, b)


def test_packed_rows_take_the_mask_under_torch_compile(tiny_config, monkeypatch):
    """Traced by torch.compile, packed rows take the block-diagonal mask (one graph for every
    row layout), which is why a compiled chat run cannot use the flash kernel (sft-5090.yaml)."""
    cfg = tiny_config()
    model = build_model(cfg).eval()
    masks = []
    sdpa = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, is_causal=False, **kw):
        masks.append(attn_mask)
        return sdpa(q, k, v, attn_mask=attn_mask, is_causal=is_causal, **kw)

    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", recording)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    row = torch.randint(0, cfg.vocab_size, (1, 8))
    with torch.no_grad():
        model(row, segments=torch.tensor([[0] * 5 + [1] * 3]))
    assert masks and all(m is not None and m.shape == (1, 1, 8, 8) for m in masks)


def test_a_segment_id_that_comes_back_is_one_document():
    """Ids 0, 1, 0: not a packed row; the third run still reads the first (the mask's rule)."""
    assert model_module.segment_spans(torch.tensor([[0, 0, 1, 1, 2]])) == [[(0, 2), (2, 4), (4, 5)]]
    assert model_module.segment_spans(torch.tensor([[0, 0, 1, 1, 0]])) is None


def test_qk_norm_gain_init_sets_the_bound_of_the_attention_logits(tiny_config):
    """The q/k norms' gains start at model.qk_norm_gain_init, the other norms at 1, and the draws
    of every matrix are the same as with gains at 1 (only the gains differ)."""
    plain = build_model(tiny_config())
    torch.manual_seed(0)
    plain.init_weights()
    sharp = build_model(tiny_config(qk_norm_gain_init=3.0))
    torch.manual_seed(0)
    sharp.init_weights()
    for (name, a), (_, b) in zip(
        plain.state_dict().items(), sharp.state_dict().items(), strict=True
    ):
        if name.endswith(("q_norm.weight", "k_norm.weight")):
            assert (a == 1).all() and (b == 3).all(), name
        else:
            assert torch.equal(a, b), name
