"""Enlace model speed vs Hugging Face transformers' Qwen3, side by side in one run, same weights.

    uv run python benchmarks/bench_model.py [--threads 2] [--repeats 5] [--skip-train]

At the tiny-50m shape (configs/model/tiny-50m.yaml: width 512, 8 layers, 8 heads, 2 kv heads,
SwiGLU 1536, vocabulary 32768, context 1024, tied embeddings), float32, on CPU:

1. batch-1 greedy decoding, a 16-token prompt and 128 new tokens: `enlace_model.generate` vs
   `Qwen3ForCausalLM.generate` (its default cache) loaded from Enlace's own export. Reports the
   median time per new token, the ratio, and the fraction of the memory-bandwidth bound: bytes of
   weights read per token (every matrix once, the tied head included; the embedding lookup reads
   one row) divided by the bandwidth of a large tensor copy, over the measured time per token.
2. training step (forward + backward + AdamW) at batch 8, sequence 256: tokens/s for both, and the
   achieved FLOP/s (flops_per_token × tokens/s) against a measured float32 matmul peak.

Medians over --repeats runs, the two implementations interleaved. The machine is shared: the
load average is printed at start and end so a reader can judge the noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from enlace_config import load_config
from enlace_config.schema.model import ModelConfig
from enlace_model import atomic_checkpoint, build_model, flops_per_token, generate, save_model
from enlace_model.export import export_hf

# The shape the benchmarks compare at (bench_gguf.py imports it too).
TINY_50M_FILE = Path(__file__).resolve().parents[1] / "configs" / "model" / "tiny-50m.yaml"
TINY_50M = load_config(TINY_50M_FILE, schema=ModelConfig).config


def median_time(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def best_time(fn: Callable[[], object], repeats: int) -> float:
    return min(median_time(fn, 1) for _ in range(repeats))


def read_bandwidth(nbytes: int = 256 << 20, repeats: int = 9) -> float:
    """Bytes/s read by summing a large tensor (decoding reads weights, it writes almost
    nothing), best of `repeats`: the attainable bandwidth, so the fraction of the bound is not
    flattered by a noisy measurement."""
    src = torch.empty(nbytes // 4, dtype=torch.float32).normal_()
    src.sum()
    return nbytes / best_time(src.sum, repeats)


def copy_bandwidth(nbytes: int = 256 << 20, repeats: int = 9) -> float:
    """Bytes/s moved by a large tensor copy (read + write counted), best of `repeats`."""
    src = torch.empty(nbytes // 4, dtype=torch.float32).normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    return 2 * nbytes / best_time(lambda: dst.copy_(src), repeats)


def matmul_peak(n: int = 2048, repeats: int = 9) -> float:
    """float32 FLOP/s of a large square matmul, best of `repeats`."""
    a = torch.randn(n, n)
    b = torch.randn(n, n)
    a @ b
    return 2 * n**3 / best_time(lambda: a @ b, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds per comparison")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument(
        "--z-loss",
        type=float,
        default=0.0,
        help="enlace's z-loss weight in the training step (0: plain cross-entropy, like the "
        "transformers side)",
    )
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument(
        "--thread-variants", action="store_true", help="also compare _decode_step's thread use"
    )
    args = ap.parse_args()

    warnings.filterwarnings("ignore")
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"threads {torch.get_num_threads()}, load average at start {os.getloadavg()}"
    )

    cfg = TINY_50M
    model = build_model(cfg).eval()
    n_params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        with atomic_checkpoint(tmp, 0) as d:
            save_model(d, model, cfg)
        export_hf(tmp, f"{tmp}/hf")
        hf = AutoModelForCausalLM.from_pretrained(f"{tmp}/hf", dtype=torch.float32).eval()
    print(f"tiny-50m: {n_params / 1e6:.1f} M parameters, {type(hf).__name__} from Enlace's export")

    if not args.skip_decode:
        bw = read_bandwidth()
        print(
            f"\nmeasured bandwidth (best of 9): read {bw / 1e9:.1f} GB/s, "
            f"copy {copy_bandwidth() / 1e9:.1f} GB/s"
        )
        prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt_tokens)).tolist()
        new = args.new_tokens
        ids = torch.tensor(prompt)
        ours_out: list[list[int]] = []
        theirs_out: list[int] = []

        def ours() -> None:
            ours_out[:] = generate(model, prompt, new)

        def theirs() -> None:
            with torch.inference_mode():
                out = hf.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=new,
                    min_new_tokens=new,
                    do_sample=False,
                    pad_token_id=0,
                )
            theirs_out[:] = out[0, args.prompt_tokens :].tolist()

        ours()
        theirs()  # warm-up
        t_ours, t_theirs = [], []
        print(f"== batch-1 greedy decoding, prompt {args.prompt_tokens}, {new} new tokens, fp32")
        for r in range(args.repeats):  # interleaved rounds: both see the same machine load
            t_ours.append(median_time(ours, 1) / new)
            t_theirs.append(median_time(theirs, 1) / new)
            print(
                f"  round {r + 1}: enlace {t_ours[-1] * 1e3:7.2f} ms/token, transformers "
                f"{t_theirs[-1] * 1e3:7.2f} ms/token  (load {os.getloadavg()[0]:.1f})"
            )
        # The floor with the same access pattern: only the weight reads, i.e. one matrix-vector
        # product per weight matrix of the model (the head included), nothing else; best of 9.
        mats = [
            p.detach()
            for n, p in model.named_parameters()
            if p.ndim == 2 and n not in ("embed.weight", "lm_head.weight")
        ]
        mats.append(model.head_weight.detach())
        vecs = {w.shape[1]: torch.randn(1, w.shape[1]) for w in mats}

        def matvecs() -> None:
            for w in mats:
                torch.nn.functional.linear(vecs[w.shape[1]], w)

        with torch.inference_mode():
            matvecs()
            floor = best_time(matvecs, 9)
        same = sum(a == b for a, b in zip(ours_out[0], theirs_out, strict=False))
        weight_bytes = (n_params - cfg.vocab_size * cfg.d_model + cfg.d_model) * 4
        if cfg.tie_embeddings:  # the head reads the whole (shared) matrix
            weight_bytes += cfg.vocab_size * cfg.d_model * 4
        bound = weight_bytes / bw
        for label, pick in (("median", statistics.median), ("best", min)):
            mo, mt = pick(t_ours), pick(t_theirs)
            print(
                f"{label:>6}: enlace {mo * 1e3:7.2f} ms/token ({1 / mo:5.1f} tokens/s), "
                f"transformers {mt * 1e3:7.2f} ms/token ({1 / mt:5.1f} tokens/s), "
                f"speed-up {mt / mo:.2f}x; of the matvec floor: enlace {floor / mo:.0%}, "
                f"transformers {floor / mt:.0%}; of the read-bandwidth bound: enlace "
                f"{bound / mo:.0%}, transformers {bound / mt:.0%}"
            )
        print(
            f"weights read per token {weight_bytes / 1e6:.0f} MB / read bandwidth "
            f"{bw / 1e9:.1f} GB/s = bound {bound * 1e3:.2f} ms/token; matvec floor (the same "
            f"weights read by bare matrix-vector products, caches as in decoding) "
            f"{floor * 1e3:.2f} ms/token = {weight_bytes / floor / 1e9:.1f} GB/s; same greedy "
            f"tokens: {same}/{new}"
        )

    if args.thread_variants:
        # Why _decode_step gives the thread pool only to the matmuls: enlace's decoding with the
        # pool for every op, for matmuls only (the default), and with one thread, interleaved.
        import enlace_model.generation as generation_module

        prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt_tokens)).tolist()
        variants = {"2 threads, all ops": (2, False), "2 threads, matmuls only": (2, True)}
        variants["1 thread"] = (1, False)
        times: dict[str, list[float]] = {name: [] for name in variants}
        print(f"== enlace decoding, thread use ({args.new_tokens} new tokens)")
        for _ in range(args.repeats):
            for name, (threads, split) in variants.items():
                torch.set_num_threads(threads)
                generation_module.SPLIT_DECODE_THREADS = split
                times[name].append(
                    median_time(lambda: generate(model, prompt, args.new_tokens), 1)
                    / args.new_tokens
                )
        torch.set_num_threads(args.threads)
        generation_module.SPLIT_DECODE_THREADS = True
        for name, ts in times.items():
            print(
                f"{name:>24}: median {statistics.median(ts) * 1e3:7.2f} ms/token, best "
                f"{min(ts) * 1e3:6.2f}  rounds {[round(t * 1e3, 1) for t in ts]}"
            )
        print(f"load average now {os.getloadavg()}")

    if not args.skip_train:
        peak = matmul_peak()
        print(f"\nmeasured fp32 matmul peak (2048², best of 9) {peak / 1e9:.1f} GFLOP/s")
        B, T = 8, 256
        x = torch.randint(0, cfg.vocab_size, (B, T))
        y = torch.randint(0, cfg.vocab_size, (B, T))
        model.train()
        hf.train()
        opt_ours = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=False, foreach=True)
        opt_theirs = torch.optim.AdamW(hf.parameters(), lr=1e-4, fused=False, foreach=True)

        def step_ours() -> None:
            loss = model(x, y, z_loss_weight=args.z_loss).loss
            assert loss is not None
            loss.backward()
            opt_ours.step()
            opt_ours.zero_grad(set_to_none=True)

        def step_theirs() -> None:
            logits = hf(x).logits
            loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))
            loss.backward()
            opt_theirs.step()
            opt_theirs.zero_grad(set_to_none=True)

        step_ours()
        step_theirs()
        t_ours, t_theirs = [], []
        for _ in range(args.repeats):
            t_ours.append(median_time(step_ours, 1))
            t_theirs.append(median_time(step_theirs, 1))
        mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
        fpt = flops_per_token(cfg, T)
        print(f"== training step (forward + backward + AdamW), batch {B}, sequence {T}, fp32")
        print(
            f"enlace       {mo * 1e3:8.0f} ms/step  {B * T / mo:7.0f} tokens/s  "
            f"{fpt * B * T / mo / 1e9:6.1f} GFLOP/s = {fpt * B * T / mo / peak:.0%} of matmul peak"
        )
        print(
            f"transformers {mt * 1e3:8.0f} ms/step  {B * T / mt:7.0f} tokens/s  "
            f"{fpt * B * T / mt / 1e9:6.1f} GFLOP/s = {fpt * B * T / mt / peak:.0%} of matmul peak"
        )
        print(f"speed-up {mt / mo:.2f}x")
        print(f"load average now {os.getloadavg()}")
    print(f"\nload average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
