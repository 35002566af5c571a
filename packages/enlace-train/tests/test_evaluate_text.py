"""Bits per byte on text files (enlace_train/evaluate_text.py and `enlace-train eval`)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from enlace_config.schema import ModelConfig
from enlace_data.tokenizer import ByteTokenizer
from enlace_model import build_model, save_model
from enlace_train.evaluate_text import Window, score_text, windows

TEXT = "En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho tiempo que vivía un hidalgo.\n"


def test_windows_by_hand():
    # 10 tokens, window 4, stride 2: targets 1..9, each once; later windows score their last 2
    assert windows(10, 4, 2) == [Window(0, 4, 0), Window(2, 6, 2), Window(4, 8, 2), Window(6, 9, 2)]
    assert windows(10, 4, 4) == [Window(0, 4, 0), Window(4, 8, 0), Window(8, 9, 0)]
    assert windows(1, 4, 2) == []
    with pytest.raises(ValueError, match="stride"):
        windows(10, 4, 5)


@pytest.mark.parametrize(
    ("n", "window", "stride"), [(50, 8, 3), (50, 8, 8), (50, 8, 1), (7, 16, 5)]
)
def test_every_target_scored_once_with_enough_context(n, window, stride):
    seen = []
    for k, w in enumerate(windows(n, window, stride)):
        assert w.end - w.begin <= window
        for p in range(w.first, w.end - w.begin):  # position p predicts target begin + p + 1
            seen.append(w.begin + p + 1)
            if k > 0:
                assert p + 1 >= window - stride + 1  # tokens of left context
    assert seen == list(range(1, n))


class Favours(torch.nn.Module):
    """A stand-in model: every position gives token `favoured` logit ln(3), the 263 others 0."""

    def __init__(self, favoured: int) -> None:
        super().__init__()
        self.favoured = favoured
        self.dummy = torch.nn.Parameter(torch.zeros(()))

    def forward(self, idx: torch.Tensor) -> SimpleNamespace:
        logits = torch.zeros((*idx.shape, 264))
        logits[..., self.favoured] = math.log(3)
        return SimpleNamespace(logits=logits)


def test_hand_computed_bits_per_byte(tmp_path):
    a = tmp_path / "a.txt"
    a.write_text("aaaa", encoding="utf-8")
    score = score_text(Favours(ord("a")), ByteTokenizer(), [a], window=2, stride=1, batch_size=2)
    # <|endoftext|> first, so all 4 bytes are scored, each costing -log2(3/266)
    assert score.bytes == 4 and score.tokens == 4
    assert score.bits_per_byte == pytest.approx(math.log2(266 / 3), rel=1e-6)
    b = tmp_path / "b.txt"
    b.write_text("ñbc", encoding="utf-8")  # 4 bytes, none an "a"
    score = score_text(Favours(ord("a")), ByteTokenizer(), [a, b], window=4, stride=2, batch_size=1)
    assert [f.bytes for f in score.files] == [4, 4]
    assert score.files[1].bits_per_byte == pytest.approx(math.log2(266), rel=1e-6)
    assert score.bits_per_byte == pytest.approx((math.log2(266 / 3) + math.log2(266)) / 2)


def tiny_model() -> tuple[torch.nn.Module, ModelConfig]:
    torch.manual_seed(3)
    cfg = ModelConfig(
        vocab_size=264, context_length=32, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1,
        ffn_hidden=64,
    )  # fmt: skip
    return build_model(cfg), cfg


def test_byte_model_bits_per_byte_equals_bits_per_token_and_the_direct_loss(tmp_path):
    model, _ = tiny_model()
    f = tmp_path / "t.txt"
    f.write_text(TEXT[:30], encoding="utf-8")  # ASCII, shorter than the context: one window
    score = score_text(model, ByteTokenizer(), [f], window=32, stride=16, batch_size=4)
    assert score.bits_per_byte == score.bits_per_token
    ids = torch.tensor([[256, *TEXT[:30].encode()]])  # <|endoftext|> first
    with torch.no_grad():
        direct = model(ids[:, :-1], ids[:, 1:]).ce_loss.item() / math.log(2)
    assert score.bits_per_byte == pytest.approx(direct, rel=1e-5)


def test_longer_context_never_hurts_a_trained_like_comparison(tmp_path):
    """Strides change only context: the same bytes are counted, batch size changes nothing."""
    model, _ = tiny_model()
    f = tmp_path / "t.txt"
    f.write_text(TEXT * 3, encoding="utf-8")
    one = score_text(model, ByteTokenizer(), [f], window=32, stride=16, batch_size=1)
    many = score_text(model, ByteTokenizer(), [f], window=32, stride=16, batch_size=64)
    full = score_text(model, ByteTokenizer(), [f], window=32, stride=32, batch_size=8)
    assert one.bytes == many.bytes == full.bytes == len((TEXT * 3).encode())
    assert one.bits_per_byte == pytest.approx(many.bits_per_byte, rel=1e-6)


def eval_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "enlace_train", "eval", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_cli_prints_a_line_and_json_and_is_deterministic(tmp_path):
    model, cfg = tiny_model()
    checkpoint = tmp_path / "ckpt"
    save_model(checkpoint, model, cfg)
    ByteTokenizer().save(checkpoint)  # what the trainer puts beside the weights
    books = [tmp_path / "uno.txt", tmp_path / "dos.txt"]
    books[0].write_text(TEXT * 4, encoding="utf-8")
    books[1].write_text("¿Qué tal?\n" * 20, encoding="utf-8")
    first = eval_cli(
        str(checkpoint), *map(str, books), "--stride", "8", "--json", str(tmp_path / "a.json")
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("bits/byte ") and "window 32, stride 8" in first.stdout
    again = eval_cli(str(checkpoint), *map(str, books), "--stride", "8")
    result = json.loads(again.stdout.splitlines()[1])
    assert result == json.loads((tmp_path / "a.json").read_text())  # same figures, bit for bit
    assert [f["bytes"] for f in result["files"]] == [len((TEXT * 4).encode()), 12 * 20]
    assert 0 < result["bits_per_byte"] < 9


def test_cli_refuses_a_window_beyond_the_context(tmp_path):
    model, cfg = tiny_model()
    save_model(tmp_path / "ckpt", model, cfg)
    ByteTokenizer().save(tmp_path / "ckpt")
    (tmp_path / "t.txt").write_text("hola", encoding="utf-8")
    proc = eval_cli(str(tmp_path / "ckpt"), str(tmp_path / "t.txt"), "--window", "64")
    assert proc.returncode == 2
    assert "--window 64 exceeds the model's context_length 32" in proc.stderr
    assert "Traceback" not in proc.stderr
