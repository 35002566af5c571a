"""A SentencePiece run exported to Hugging Face: the tokenizer files enlace-data wrote into the
checkpoint are copied, and AutoTokenizer on the folder gives Enlace's ids (except the documented
difference: with split_special_tokens false, typed "<|endoftext|>" becomes the special id, as a
rendered chat template needs), with Enlace's eos in the model's configs, the chat template, a
generation length bounded by the context and a model card that says it is a base model. (Top level: it needs enlace-data, enlace-model and
transformers together.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from enlace_config.schema.model import ModelConfig  # noqa: E402
from enlace_data import load_tokenizer  # noqa: E402
from enlace_data.tokenizer import train_tokenizer  # noqa: E402
from enlace_model import atomic_checkpoint, build_model, save_model  # noqa: E402
from enlace_model.export import export_hf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "packages" / "enlace-data" / "tests" / "sample_es.txt"
TEXTS = [
    "¡Hola, señora Núñez! ¿Cómo está usted?",
    "El año 1605 costó 3.250 maravedís.  Dos espacios, y\ttabulador.",
    "Emoji y escrituras raras: 😀 ☃ 漢字 ε",
    "\n\nlíneas\n\n\nvacías\n",
    "El texto literal <|endoftext|> no es un token especial.",
]


def test_sentencepiece_export_gives_enlace_ids(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    lines = SAMPLE.read_text(encoding="utf-8").split("\n")
    tok = train_tokenizer(lines, vocab_size=600)
    smoke = yaml.safe_load((REPO / "configs" / "model" / "smoke.yaml").read_text())
    cfg = ModelConfig(**{**smoke, "vocab_size": tok.vocab_size, "context_length": 64})
    with atomic_checkpoint(tmp_path / "run", 1) as d:
        save_model(d, build_model(cfg), cfg)
        tok.save(d)
    run_config = {"run": {"name": "sp"}, "data": {"kind": "shards", "path": "corpus"}}
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(run_config))
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    hf = AutoTokenizer.from_pretrained(out)
    assert len(hf) == tok.vocab_size and hf.eos_token_id == tok.eot_id == 1
    assert hf.model_max_length == 64
    for text in TEXTS + lines[:50]:
        ids = tok.encode(text)
        if any(name in text for name in tok.special_ids if name != "<unk>"):
            # With the chat template, Hugging Face reads special-token text as the special id
            # (apply_chat_template needs it); Enlace's encode never does. The one difference.
            assert tok.eot_id in hf(text)["input_ids"], text
            continue
        assert hf(text, add_special_tokens=True)["input_ids"] == ids, text
        assert hf.decode(ids) == tok.decode(ids)
    assert hf.pad_token_id == 1
    im_end = tok.special_ids["<|im_end|>"]
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert model.generation_config.eos_token_id == [im_end, 1]  # chat: turn end too
    assert model.generation_config.max_length == cfg.context_length  # prompt + continuation
    assert json.loads((out / "config.json").read_text())["pad_token_id"] == 1
    card = (out / "README.md").read_text()
    assert "language:\n- es" in card and "license: mit" in card and "llama-server" in card
    assert "**Modelo base**" in card and f"{tok.vocab_size} piezas" in card  # chat template or not
    assert load_tokenizer(out).tokenizer_id == tok.tokenizer_id  # read back by the same rule
