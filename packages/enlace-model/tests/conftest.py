"""Fixtures for enlace-model's tests: a fixed seed and float32 default dtype around every test, and
tiny configs (2 layers, width 32) so every test runs in milliseconds."""

from __future__ import annotations

import io
import json
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from enlace_config.schema.model import ModelConfig
from enlace_model import atomic_checkpoint, build_model, save_model


@pytest.fixture(autouse=True, scope="session")
def _one_thread() -> Iterator[None]:
    """Tiny shapes gain nothing from threads, and the 2 cores are shared: one intra-op thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _reset_torch() -> Iterator[None]:
    torch.manual_seed(0)
    random.seed(0)
    torch.set_default_dtype(torch.float32)
    yield
    torch.set_default_dtype(torch.float32)


def _tiny_config(**overrides: object) -> ModelConfig:
    base: dict[str, object] = {
        "vocab_size": 64,
        "context_length": 64,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "ffn_hidden": 64,
    }
    return ModelConfig.model_validate(base | overrides)


@pytest.fixture
def tiny_config() -> Callable[..., ModelConfig]:
    """tiny_config(**overrides) → a ModelConfig of 2 layers, width 32, GQA 4/2, vocab 64."""
    return _tiny_config


@pytest.fixture
def cfg() -> ModelConfig:
    return _tiny_config()


@pytest.fixture
def perturb_norms() -> Callable[..., None]:
    return _perturb_norms


def _perturb_norms(model: torch.nn.Module, std: float = 0.3) -> None:
    """Norm weights start at 1; spread them so a test sees whether each one is applied."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, std)


# --- a SentencePiece checkpoint -----------------------------------------------------------------
SPECIAL_TOKENS = [
    "<unk>",
    "<|endoftext|>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    "<|tool_call|>",
    "<|tool_result|>",
    *(f"<|reserved_{i}|>" for i in range(8)),
]

BUILTIN_SPANISH = """\
En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho tiempo que vivía un \
hidalgo de los de lanza en astillero, adarga antigua, rocín flaco y galgo corredor.
Una olla de algo más vaca que carnero, salpicón las más noches, duelos y quebrantos los sábados, \
lentejas los viernes, algún palomino de añadidura los domingos, consumían las tres partes de su hacienda.
El resto della concluían sayo de velarte, calzas de velludo para las fiestas, con sus pantuflos de \
lo mesmo, y los días de entresemana se honraba con su vellorí de lo más fino.
Tenía en su casa una ama que pasaba de los cuarenta, y una sobrina que no llegaba a los veinte, y un \
mozo de campo y plaza, que así ensillaba el rocín como tomaba la podadera.
Frisaba la edad de nuestro hidalgo con los cincuenta años; era de complexión recia, seco de carnes, \
enjuto de rostro, gran madrugador y amigo de la caza.
En 1605 y en 1615 se publicaron las dos partes; costaban 290 maravedís y 3 reales.
"""


def spanish_lines() -> list[str]:
    """Built-in Spanish, plus a slice of a shared public-domain book when the data is there."""
    lines = BUILTIN_SPANISH.splitlines()
    root = os.environ.get("ENLACE_SHARED_DATA")
    books = sorted(Path(root, "es-pd").glob("*.txt")) if root else []
    if books:
        text = books[0].read_text(encoding="utf-8", errors="replace")[20000:50000]
        lines += [line for line in text.splitlines() if line.strip()]
    return lines


def train_sentencepiece(lines: list[str]) -> bytes:
    """A tiny SentencePiece model trained with enlace-data's options (see its tokenizer.py)."""
    spm = pytest.importorskip("sentencepiece")
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=600,
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=-1,
        eos_id=-1,
        pad_id=-1,
        control_symbols=SPECIAL_TOKENS[1:],
        user_defined_symbols=["\n"],
        character_coverage=0.9995,
        input_sentence_size=0,
        shuffle_input_sentence=False,
        max_sentencepiece_length=16,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return buf.getvalue()


@dataclass
class SentencePieceRun:
    run: Path  # the run directory
    checkpoint: Path  # its checkpoints/step_1
    proto: bytes  # tokenizer.model
    lines: list[str]  # the training text
    model: torch.nn.Module
    cfg: ModelConfig


@pytest.fixture
def sentencepiece_run(
    tmp_path: Path, perturb_norms: Callable[..., None]
) -> Callable[..., SentencePieceRun]:
    """sentencepiece_run(chat_template=None, **config overrides): a run directory whose checkpoint
    holds a tiny model, a SentencePiece tokenizer trained the Enlace way, its description, and
    optionally a chat template."""

    def make(chat_template: str | None = None, **overrides: object) -> SentencePieceRun:
        lines = spanish_lines()
        proto = train_sentencepiece(lines)
        spm = pytest.importorskip("sentencepiece")
        vocab = spm.SentencePieceProcessor(model_proto=proto).get_piece_size()
        cfg = _tiny_config(vocab_size=vocab, **overrides)
        model = build_model(cfg)
        perturb_norms(model)
        special = {name: i for i, name in enumerate(SPECIAL_TOKENS)}
        info = {"kind": "sentencepiece", "special_ids": special, "eot_id": 1, "vocab_size": vocab}
        with atomic_checkpoint(tmp_path / "run", 1) as d:
            save_model(d, model, cfg)
            (d / "tokenizer.model").write_bytes(proto)
            (d / "tokenizer.json").write_text(json.dumps(info))
            if chat_template is not None:
                (d / "chat_template.jinja").write_text(chat_template, encoding="utf-8")
        ckpt = tmp_path / "run" / "checkpoints" / "step_1"
        return SentencePieceRun(tmp_path / "run", ckpt, proto, lines, model, cfg)

    return make
