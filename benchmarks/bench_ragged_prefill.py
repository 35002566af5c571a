"""The prefill of a ragged batch of prompts, two ways side by side in one process: each prompt alone
into its row of the cache (enlace_model's way since issue 35's twenty-fourth session) against the
whole left-padded batch with a (B, 1, P, P) additive mask (what it did before).

    uv run python benchmarks/bench_ragged_prefill.py [--threads 2] [--rounds 5] [--batch 64]

The shape is the chat evaluation's at the end of scripts/chat-cpu.sh (configs/runs/sft-cpu.yaml:
model/smoke.yaml at 3,072 positions, float32, enlace_train/chat_eval.py's groups of REPLY_BATCH
prompts, the shortest first): prompts of 400-2,910 tokens, one sorted group. The weights are the
initialisation's: the prefill's time does not depend on them. Both ways are checked to give the
same last logits first. Rounds alternate the two ways; medians over the rounds, the load average
printed, and the mask's size (the memory the old way needed beside the cache).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

import torch
from enlace_config import load_config
from enlace_config.schema.model import ModelConfig
from enlace_model import build_model
from enlace_model.generation import _prefill_each

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "model" / "smoke.yaml"


def masked_batch(model, prompts: list[list[int]]) -> torch.Tensor:
    """The old way: the left-padded batch in one forward_cached, the padding hidden by a mask."""
    B, P = len(prompts), max(len(p) for p in prompts)
    pads = torch.tensor([P - len(p) for p in prompts])
    idx = torch.tensor([[0] * (P - len(p)) + p for p in prompts])  # (B, P)
    slots = torch.arange(P)
    positions = (slots.unsqueeze(0) - pads.unsqueeze(1)).clamp(min=0)  # (B, P)
    real = slots.unsqueeze(0) >= pads.unsqueeze(1)  # (B, P)
    allowed = (torch.ones(P, P, dtype=torch.bool).tril() & real[:, None, :]) | torch.eye(
        P, dtype=torch.bool
    )
    mask = torch.zeros(B, 1, P, P).masked_fill_(~allowed.view(B, 1, P, P), float("-inf"))
    return model.forward_cached(idx, model.new_cache(B, P), 0, positions, mask)


def each_alone(model, prompts: list[list[int]]) -> torch.Tensor:
    P = max(len(p) for p in prompts)
    return _prefill_each(
        model, prompts, [P - len(p) for p in prompts], model.new_cache(len(prompts), P)
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(SMOKE, schema=ModelConfig).config.model_copy(update={"context_length": 3072})
    model = build_model(cfg).eval()
    rng = random.Random(0)
    prompts = sorted(
        ([rng.randrange(cfg.vocab_size) for _ in range(rng.randint(400, 2910))]
         for _ in range(args.batch)),
        key=len,
    )  # fmt: skip
    P = max(len(p) for p in prompts)
    print(f"{args.batch} prompts of {len(prompts[0])}-{P} tokens ({sum(map(len, prompts))} in all), "
          f"{args.threads} threads, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    with torch.inference_mode():
        torch.testing.assert_close(each_alone(model, prompts), masked_batch(model, prompts),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        times: dict[str, list[float]] = {"masked batch": [], "each alone": []}
        for _ in range(args.rounds):
            for name, way in (("masked batch", masked_batch), ("each alone", each_alone)):
                start = time.perf_counter()
                way(model, prompts)
                times[name].append(time.perf_counter() - start)
    old, new = (statistics.median(times[k]) for k in ("masked batch", "each alone"))
    print(f"masked batch {old:.2f} s, each alone {new:.2f} s: {old / new:.2f}x "
          f"(medians of {args.rounds}; load {os.getloadavg()[0]:.1f}); "
          f"the old mask alone {args.batch * P * P * 4 / 2**30:.1f} GiB")  # fmt: skip


if __name__ == "__main__":
    main()
