"""Generation: cached decoding gives exactly the tokens full recomputation gives (float64, so that
near-ties cannot flip a token), for greedy and seeded sampling, single prompts and ragged batches."""

from __future__ import annotations

import pytest
import torch
from enlace_model import build_model, generate, generate_stream
from enlace_model.generation import _decode_step, _decode_tables, sample_next


def recompute(model, prompts, max_new, *, seed=None, stop_tokens=(), **sampling):
    """The slow reference: every step runs the whole sequence of every prompt, alone, through the
    plain forward (no cache, no padding), and draws with the same procedure and generator."""
    gen = None
    if seed is not None:
        gen = torch.Generator().manual_seed(seed)
    seqs = [list(p) for p in prompts]
    outs: list[list[int]] = [[] for _ in prompts]
    alive = [True] * len(prompts)
    with torch.no_grad():
        for _ in range(max_new):
            logits = torch.stack([model(torch.tensor([s])).logits[0, -1] for s in seqs])  # (B, V)
            nxt = sample_next(logits, generator=gen, **sampling).tolist()
            for i, t in enumerate(nxt):
                if alive[i] and t in stop_tokens:
                    alive[i] = False
                if alive[i]:
                    outs[i].append(t)
                seqs[i].append(t)
            if not any(alive):
                break
    return outs


@pytest.fixture(params=[{}, {"conv_layers": [0], "conv_kernel": 4}], ids=["attention", "conv"])
def model64(request, tiny_config, perturb_norms):
    """Every test below runs on an attention-only model and on one whose first layer is a short
    convolution (its cache holds b * x per slot, and left padding must read as zeros)."""
    cfg = tiny_config(
        vocab_size=48, context_length=48, tie_embeddings=False, init_std=0.3, **request.param
    )
    model = build_model(cfg).double().eval()
    perturb_norms(model)
    return model


def test_greedy_cached_equals_recompute_single_prompt(model64):
    prompt = [[3, 14, 15, 9, 2, 6]]
    got = generate(model64, prompt, 20)
    assert got == recompute(model64, prompt, 20)
    assert len(set(got[0])) > 3  # a non-trivial sequence


def test_greedy_ragged_batch_equals_each_prompt_alone(model64):
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9], [10, 11, 12]]
    got = generate(model64, prompts, 15)
    assert got == recompute(model64, prompts, 15)
    for p, g in zip(prompts, got, strict=True):
        assert generate(model64, [p], 15)[0] == g


def test_ragged_prefill_runs_each_prompt_alone_without_a_mask(model64, monkeypatch):
    """A (B, 1, P, P) mask made the chat evaluation's prefill ~3x slower and 2 GB bigger: each
    prompt of a ragged batch is prefilled on its own, plain causal, into its row of the cache."""
    calls = []
    forward_cached = type(model64).forward_cached

    def spy(self, idx, cache, pos, positions=None, mask=None):
        calls.append((tuple(idx.shape), positions is None, mask is None))
        return forward_cached(self, idx, cache, pos, positions, mask)

    monkeypatch.setattr(type(model64), "forward_cached", spy)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9], [10, 11, 12]]
    assert generate(model64, prompts, 4) == recompute(model64, prompts, 4)
    # the three prefills; float64 decoding takes _decode_step, not forward_cached
    assert calls == [((1, 7), True, True), ((1, 1), True, True), ((1, 3), True, True)]


def test_padding_slots_of_an_uninitialised_cache_do_not_reach_the_replies(model64, monkeypatch):
    """new_cache allocates keys and values with torch.empty (a convolution's slots are zeroed):
    whatever the padding slots held (NaN here) must not leak into a left-padded sequence."""
    new_cache = type(model64).new_cache

    def dirty(self, batch, length):
        cache = new_cache(self, batch, length)
        for first, second in cache:
            if first.dim() == 4:  # keys and values, not a convolution's zeroed b * x
                first.fill_(float("nan"))
                second.fill_(float("nan"))
        return cache

    monkeypatch.setattr(type(model64), "new_cache", dirty)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9], [10, 11, 12]]
    assert generate(model64, prompts, 10) == recompute(model64, prompts, 10)


@pytest.mark.parametrize(
    "sampling",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 5},
        {"temperature": 1.3, "top_k": 10, "top_p": 0.8},
    ],
)
def test_seeded_sampling_cached_equals_recompute(model64, sampling):
    prompts = [[5, 6, 7, 8], [20, 21]]
    got = generate(model64, prompts, 10, seed=123, **sampling)
    assert got == recompute(model64, prompts, 10, seed=123, **sampling)
    assert got == generate(model64, prompts, 10, seed=123, **sampling)  # reproducible
    assert got != generate(model64, prompts, 10, seed=124, **sampling)


def test_top_k_one_and_tiny_top_p_are_greedy(model64):
    prompt = [[1, 2, 3]]
    greedy = generate(model64, prompt, 12)
    assert generate(model64, prompt, 12, temperature=1.0, top_k=1, seed=0) == greedy
    assert generate(model64, prompt, 12, temperature=1.0, top_p=1e-9, seed=0) == greedy


def test_top_k_and_top_p_restrict_the_draws():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0, -1.0]]).repeat(200, 1)
    gen = torch.Generator().manual_seed(0)
    drawn = set(sample_next(logits, temperature=1.0, top_k=2, generator=gen).tolist())
    assert drawn == {0, 1}
    probs = torch.softmax(logits[0], -1)  # 0.64, 0.24, 0.09, ...
    assert probs[0] < 0.7 < probs[0] + probs[1]
    drawn = set(sample_next(logits, temperature=1.0, top_p=0.7, generator=gen).tolist())
    assert drawn == {0, 1}  # the smallest set reaching 0.7
    drawn = set(sample_next(logits, temperature=1.0, generator=gen).tolist())
    assert len(drawn) >= 4


def test_stop_tokens_end_each_sequence_on_its_own(model64):
    prompts = [[1, 2, 3], [30, 31]]
    free = generate(model64, prompts, 12)
    stop = free[0][4]
    first = free[0].index(stop)
    got = generate(model64, prompts, 12, stop_tokens=[stop])
    assert got[0] == free[0][:first]  # the stop token itself is not returned
    want_1 = free[1][: free[1].index(stop)] if stop in free[1] else free[1]
    assert got[1] == want_1
    assert generate(model64, [[1, 2, 3]], 12, stop_tokens=[free[0][0]]) == [[]]


def test_streaming_yields_tokens_as_they_come(model64):
    prompts = [[1, 2, 3], [4]]
    stream = generate_stream(model64, prompts, 8, temperature=0.9, seed=5)
    first = next(stream)  # available before the rest are computed
    assert len(first) == 2 and all(isinstance(t, int) for t in first)
    rest = list(stream)
    assert len(rest) == 7
    steps = [first, *rest]
    assert [[s[i] for s in steps] for i in range(2)] == generate(
        model64, prompts, 8, temperature=0.9, seed=5
    )


def test_forced_sdpa_backend_decodes_the_same(model64):
    prompts = [[1, 2, 3, 4], [7, 8]]
    want = generate(model64, prompts, 10)
    model64.set_attention("flash")  # decoding steps go through SDPA, not the single-query path
    assert generate(model64, prompts, 10) == want
    model64.set_attention("math")
    assert generate(model64, prompts, 10) == want


def test_float32_greedy_matches_recompute(tiny_config):
    model = build_model(tiny_config()).eval()
    prompt = [[1, 2, 3, 4, 5]]
    assert generate(model, prompt, 10) == recompute(model, prompt, 10)


def test_generation_past_the_context_slides_the_window(model64):
    """Issue 12: prompt + max_new_tokens beyond the context raised; the window now slides: when
    the cache is full, the last context/2 tokens are read again and decoding goes on."""
    context = model64.cfg.context_length  # 48
    prompts = [[1] * 40, [2, 3]]
    got = generate(model64, prompts, 30)
    assert [len(g) for g in got] == [30, 30]
    # the reference: the first window until the longest sequence fills the context, then each
    # sequence alone from its last context/2 tokens
    first = generate(model64, prompts, context - 40)
    for prompt, done, out in zip(prompts, first, got, strict=True):
        window = (prompt + done)[-(context // 2) :]
        assert out == done + generate(model64, [window], 30 - len(done))[0]
    # a prompt longer than the context keeps its last context/2 tokens
    long = list(range(1, 47)) * 2
    assert generate(model64, [long], 5) == generate(model64, [long[-(context // 2) :]], 5)


def test_bad_arguments_are_refused(model64):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        generate(model64, [[1, 48]], 2)
    with pytest.raises(ValueError, match="at least one token"):
        generate(model64, [[]], 2)
    with pytest.raises(ValueError, match="top_p"):
        generate(model64, [[1]], 2, temperature=1.0, top_p=0.0)
    assert generate(model64, [[1]], 0) == [[]]


def test_decode_step_equals_the_module_path_and_restores_threads(model64):
    """decode_step (stacked weights, folded rotary, single-threaded small ops) against
    forward_cached through the modules, one token at a time, on a ragged batch."""
    cfg = model64.cfg
    B, L = 2, 12
    caches = [[(k.zero_(), v.zero_()) for k, v in model64.new_cache(B, L)] for _ in range(2)]
    tokens = torch.randint(0, cfg.vocab_size, (B, L))
    positions = torch.tensor([[0] * L, [max(0, j - 3) for j in range(L)]])
    mask = torch.zeros(B, 1, 1, L, dtype=torch.float64)
    mask[1, ..., :3] = float("-inf")  # sequence 1 is left-padded by 3
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with torch.inference_mode():
            tables = _decode_tables(model64)
            for s in range(3, L):  # slots 0..2: zeros in both caches
                fast = _decode_step(
                    model64, tokens[:, s], caches[0], s, tables, positions[:, s], mask[..., : s + 1]
                )
                slow = model64.forward_cached(
                    tokens[:, s : s + 1], caches[1], s, positions[:, s : s + 1], mask[..., : s + 1]
                )
                torch.testing.assert_close(fast, slow, rtol=1e-10, atol=1e-10)
                for (k0, v0), (k1, v1) in zip(caches[0], caches[1], strict=True):
                    torch.testing.assert_close(k0, k1, rtol=1e-12, atol=1e-12)  # every slot
                    torch.testing.assert_close(v0, v1, rtol=1e-12, atol=1e-12)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
