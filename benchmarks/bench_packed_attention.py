"""The SFT's training step on packed rows, two ways side by side in one process: each document's
attention causal on its own (the model's way since issue 35's eighteenth session) against the
block-diagonal (B, 1, T, T) mask (what it did before, and still does under torch.compile).

    uv run python benchmarks/bench_packed_attention.py [--threads 2] [--rounds 5] [--batch 5] [--seq 3072]

The shape is the CPU chat recipe's fine-tuning (configs/runs/sft-cpu.yaml: model/smoke.yaml at
3,072 positions, 5 rows a step), rows packed like the chat loader's from conversations of 400 to
2,910 positions (the script's chat set: 1,294 on average, up to 2,910 with the assistant's tool
specs and memories in the system prompt), the rest of a row padding. One step = forward, backward
and an AdamW step. Rounds alternate the two ways so that drift in the machine's load hits both;
medians over the rounds, the load average printed.
Both ways are checked to give the same loss first.
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
from enlace_model import model as model_module

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "model" / "smoke.yaml"


def packed_segments(batch: int, seq: int, rng: random.Random) -> torch.Tensor:
    """Segment ids of `batch` rows packed greedily with conversations of 400-2,910 positions."""
    rows = []
    for _ in range(batch):
        ids: list[int] = []
        while True:
            n = rng.randint(400, 2910)
            if len(ids) + n > seq:
                break
            ids += [len(set(ids))] * n
        rows.append(ids + [len(set(ids))] * (seq - len(ids)))  # padding: a segment of its own
    return torch.tensor(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=5)
    ap.add_argument("--seq", type=int, default=3072)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = load_config(SMOKE, schema=ModelConfig).config.model_copy(
        update={"context_length": args.seq}
    )
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    B, T = args.batch, args.seq
    x = torch.randint(0, 256, (B, T))
    y = torch.randint(0, 256, (B, T))
    seg = packed_segments(B, T, random.Random(0))
    documents = model_module.segment_spans

    def use(way: str) -> None:
        model_module.segment_spans = documents if way == "documents" else lambda segments: None

    def step() -> float:
        t0 = time.perf_counter()
        loss = model(x, y, seg).loss
        assert loss is not None
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    losses = {}
    for way in ("documents", "mask"):
        use(way)
        with torch.no_grad():
            loss = model(x, y, seg).loss
        assert loss is not None
        losses[way] = float(loss)
    assert abs(losses["documents"] - losses["mask"]) < 1e-4, losses
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, load average at start "
        f"{os.getloadavg()}\nmodel/smoke.yaml at {T} positions, {B} rows a step, "
        f"{int(seg.max(dim=1).values.sum())} conversations and {B} paddings in them; "
        f"the mask: {B * T * T * 5 / 2**20:.0f} MiB (float32 and bool) a forward"
    )
    times: dict[str, list[float]] = {"documents": [], "mask": []}
    for _ in range(args.rounds):
        for way in times:
            use(way)
            step()  # the first step of each way in a round warms it up
            times[way].append(step())
    use("documents")
    med = {way: statistics.median(t) for way, t in times.items()}
    for way, m in med.items():
        print(
            f"{way:10} {m * 1e3:7.0f} ms/step  {B * T / m:7.0f} positions/s  (median of {args.rounds})"
        )
    print(f"documents against the mask: {med['mask'] / med['documents']:.2f}x faster")
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
