"""The Hugging Face export: transformers loads it and computes Enlace's logits (fp32, tight), for
GQA + QK-norm (Qwen3) and without QK-norm (Llama), tied and untied; AutoTokenizer on the folder
gives Enlace's ids (byte-level and SentencePiece); load_model reads the folder back; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from enlace_model import atomic_checkpoint, build_model, load_model, save_model
from enlace_model.cli import main as cli_main
from enlace_model.export import config_from_hf, export_hf

transformers = pytest.importorskip("transformers", reason="transformers is in the dev group")

TEXTS = [
    "¡Hola, señora Núñez! ¿Cómo está usted?",
    "En un lugar de la Mancha, de cuyo nombre no quiero acordarme,\nno ha mucho tiempo.",
    "El año 1605 costó 3.250 maravedís.  Dos espacios, y\ttabulador.",
    "Emoji y escrituras raras: 😀 ☃ 漢字 ε",
    "  espacios al principio y al final  ",
    "\n\nlíneas\n\n\nvacías\n",
    "El texto literal <|endoftext|> no es un token especial.",
    "",
]


def make_checkpoint(tmp_path: Path, cfg, perturb_norms) -> tuple[torch.nn.Module, Path]:
    model = build_model(cfg)
    perturb_norms(model)
    with atomic_checkpoint(tmp_path / "run", 1) as d:
        save_model(d, model, cfg)
    return model, tmp_path / "run"


def hf_logits(folder: Path, idx: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        return hf(idx).logits


@pytest.mark.parametrize(
    ("overrides", "arch"),
    [
        ({}, "Qwen3ForCausalLM"),
        ({"tie_embeddings": False}, "Qwen3ForCausalLM"),
        ({"n_kv_heads": 1, "qk_norm": False}, "LlamaForCausalLM"),
        ({"qk_norm": False, "tie_embeddings": False, "n_kv_heads": 4}, "LlamaForCausalLM"),
    ],
    ids=["qwen3-gqa-tied", "qwen3-gqa-untied", "llama-mqa-tied", "llama-mha-untied"],
)
def test_transformers_computes_enlace_logits(tmp_path, tiny_config, perturb_norms, overrides, arch):
    cfg = tiny_config(vocab_size=256, rope_theta=5000.0, norm_eps=1e-5, **overrides)
    model, run = make_checkpoint(tmp_path, cfg, perturb_norms)
    out = export_hf(run, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [arch]
    assert {"model.safetensors", "generation_config.json", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    idx = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        want = model(idx).logits
    torch.testing.assert_close(hf_logits(out, idx), want, rtol=1e-5, atol=1e-5)
    # ... and the folder loads back into Enlace, same config, same logits.
    assert config_from_hf(out / "config.json") == cfg
    with torch.no_grad():
        torch.testing.assert_close(load_model(out)(idx).logits, want, rtol=0, atol=0)


def test_byte_level_tokenizer_ids_are_the_byte_values(tmp_path, tiny_config, perturb_norms):
    from transformers import AutoTokenizer

    _, run = make_checkpoint(tmp_path, tiny_config(vocab_size=256), perturb_norms)
    out = export_hf(run, tmp_path / "hf")
    tok = AutoTokenizer.from_pretrained(out)
    for text in TEXTS:
        ids = list(text.encode("utf-8"))
        assert tok(text, add_special_tokens=True)["input_ids"] == ids, text
        assert tok.decode(ids) == text
    assert tok.convert_tokens_to_ids(tok.convert_ids_to_tokens(list(range(256)))) == list(
        range(256)
    )


# --- SentencePiece ------------------------------------------------------------------------------
# A stand-in chat template over the tokenizer's own special tokens (the chat stage writes the real
# one into the checkpoint): it checks the hook, not the format.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def test_sentencepiece_tokenizer_gives_enlace_ids(tmp_path, sentencepiece_run):
    spm = pytest.importorskip("sentencepiece")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    sp_run = sentencepiece_run(chat_template=CHAT_TEMPLATE)
    proto, lines = sp_run.proto, sp_run.lines
    sp = spm.SentencePieceProcessor(model_proto=proto)
    vocab = sp.get_piece_size()
    out = export_hf(sp_run.run, tmp_path / "hf")
    assert (out / "tokenizer.model").read_bytes() == proto
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == vocab
    samples = TEXTS + lines[:200] + ["".join(lines[:3]), "\n".join(lines[3:6])]
    for text in samples:
        want = sp.encode(text)
        got = tok(text, add_special_tokens=True)["input_ids"]
        if "<|endoftext|>" in text:  # the documented difference: special strings become ids
            assert 1 in got and 1 not in want, text
            continue
        assert got == want, text
        assert tok.decode(want) == sp.decode(want)
    assert tok.eos_token_id == 1 and tok.pad_token_id == 1
    assert tok.convert_ids_to_tokens([0, 1, 5]) == ["<unk>", "<|endoftext|>", "<|end|>"]
    # The chat template renders to the special ids (split_special_tokens false).
    chat = [{"role": "user", "content": "¿Qué hora es?"}]
    text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids == [3, *sp.encode("¿Qué hora es?"), 5, 4]
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 1 and gen["max_new_tokens"] == sp_run.cfg.context_length
    assert json.loads((out / "config.json").read_text())["pad_token_id"] == 1
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert hf.generation_config.eos_token_id == 1
    assert hf.generation_config.max_new_tokens == sp_run.cfg.context_length
    card = (out / "README.md").read_text()
    assert "language:\n- es" in card and "license: mit" in card and "llama-server" in card
    assert "plantilla de chat" in card and f"{vocab} piezas" in card


def test_cli_export_and_errors(tmp_path, tiny_config, perturb_norms, capsys):
    _, run = make_checkpoint(tmp_path, tiny_config(vocab_size=256), perturb_norms)
    assert cli_main(["export", str(run), str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "config.json").is_file()
    assert "exported" in capsys.readouterr().out
    assert cli_main(["export", str(tmp_path / "missing"), str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "no such file or directory" in err and "Traceback" not in err
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert cli_main(["export", str(run), str(tmp_path / "busy")]) == 2
    assert "not an earlier export" in capsys.readouterr().err
    with pytest.raises(Exception, match="no such file"):
        cli_main(["--debug", "export", str(tmp_path / "missing"), str(tmp_path / "o3")])
