"""Stage 1 to training: raw text -> `enlace-data corpus` -> shards -> the shard loader -> 20 AdamW
steps of a tiny enlace-model transformer, whose loss falls. (Top level: it needs torch, which
enlace-data's own environment does not have.)"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from enlace_config.schema.data import DataConfig  # noqa: E402
from enlace_config.schema.model import ModelConfig  # noqa: E402
from enlace_data.cli import main as data_cli  # noqa: E402
from enlace_data.loader import build_loader, eval_batches  # noqa: E402
from enlace_data.sample import builtin_split  # noqa: E402
from enlace_model import build_model  # noqa: E402


def _write_sources(root: Path) -> None:
    """Paragraphs of the built-in books (val split) as jsonl documents, plus a wrapped .txt 'book'."""
    paragraphs = [
        p
        for p in builtin_split("val")[:60_000].decode("utf-8", "ignore").split("\n\n")
        if len(p) > 200
    ]
    (root / "web").mkdir(parents=True)
    with open(root / "web" / "docs.jsonl", "w", encoding="utf-8") as f:
        for i in range(0, len(paragraphs) - 1, 2):
            f.write(json.dumps({"text": paragraphs[i] + "\n\n" + paragraphs[i + 1]}) + "\n")
    rng = random.Random(0)
    book = []
    for p in paragraphs:  # hard-wrap at ~70 columns like Project Gutenberg
        line, lines = "", []
        for w in p.split():
            if len(line) + len(w) + 1 > 70:
                lines.append(line)
                line = w
            else:
                line = f"{line} {w}".strip()
        lines.append(line)
        book.append("\n".join(lines))
    rng.shuffle(book)
    (root / "book.txt").write_text("\n\n".join(book) + "\n", encoding="utf-8")


def test_raw_text_to_falling_loss(tmp_path: Path) -> None:
    _write_sources(tmp_path)
    out = tmp_path / "corpus"
    config = {
        "name": "e2e",
        "out_dir": str(out),
        "sources": [
            {"name": "web", "path": str(tmp_path / "web")},
            {"name": "book", "path": str(tmp_path / "book.txt")},
        ],
        "cleaning": {"doc_chars": 1200, "min_chars": 100},
        "split": {"val_fraction": 0.15},
        "tokenizer": {"vocab_size": 512, "num_threads": 1},
        "encoding": {"shard_tokens": 4000, "workers": 1},
    }
    cfg_file = tmp_path / "corpus.yaml"
    cfg_file.write_text(json.dumps(config))  # JSON is YAML
    assert data_cli(["corpus", str(cfg_file), "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    vocab = manifest["vocab_size"]
    assert len(manifest["splits"]["train"]["shards"]) >= 2

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only add contention (seconds on a busy box)
    try:
        _train_and_check(out, vocab)
    finally:
        torch.set_num_threads(threads)


def _train_and_check(out: Path, vocab: int) -> None:
    T, B = 32, 8
    data_cfg = DataConfig(kind="shards", path=str(out), context_length=T, eval_batches=4)
    model_cfg = ModelConfig(
        vocab_size=vocab, context_length=T, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
        ffn_hidden=64,
    )  # fmt: skip
    model = build_model(model_cfg)
    loader = build_loader(data_cfg, micro_batch_size=B, seed=0, vocab_size=vocab)
    val = eval_batches(data_cfg, micro_batch_size=B, vocab_size=vocab)

    def val_loss() -> float:
        model.eval()
        with torch.no_grad():
            losses = [
                model(torch.from_numpy(x), torch.from_numpy(y)).ce_loss.item() for x, y in val
            ]
        model.train()
        return float(np.mean(losses))

    before = val_loss()
    # A plain AdamW written out: torch.optim's constructor imports torch._dynamo (seconds).
    params = [p for p in model.parameters() if p.requires_grad]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    lr, b1, b2, eps = 1e-2, 0.9, 0.95, 1e-8
    losses = []
    for step in range(1, 21):
        x, y = next(loader)
        assert x.shape == (B, T) and int(x.max()) < vocab
        out_ = model(torch.from_numpy(x), torch.from_numpy(y))
        for p in params:
            p.grad = None
        out_.loss.backward()
        with torch.no_grad():
            for p, m_, v_ in zip(params, m, v, strict=True):
                m_.mul_(b1).add_(p.grad, alpha=1 - b1)
                v_.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (v_ / (1 - b2**step)).sqrt_().add_(eps)
                p.addcdiv_(m_, denom, value=-lr / (1 - b1**step))
        losses.append(out_.ce_loss.item())
    after = val_loss()
    assert np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses
    assert after < before - 0.5, (before, after)
