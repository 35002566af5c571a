"""The Hugging Face export: transformers loads it and computes Enlace's logits (fp32, tight), for
GQA + QK-norm (Qwen3) and without QK-norm (Llama), tied and untied; generate() with the exported
generation_config stays within the context; the tokenizer files are copied (that AutoTokenizer
then gives Enlace's ids is tested in tests/test_e2e_export.py, with enlace-data's real files); the
model card says base or chat from the run's config; load_model reads the folder back; the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from enlace_model import CheckpointError, atomic_checkpoint, build_model, load_model, save_model
from enlace_model.cli import main as cli_main
from enlace_model.export import export_hf
from enlace_model.hf import config_from_hf

transformers = pytest.importorskip("transformers", reason="transformers is in the dev group")


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
        ({"qk_norm_gain_init": 3.0}, "Qwen3ForCausalLM"),
        ({"conv_layers": [0], "conv_kernel": 4}, "Lfm2ForCausalLM"),
        ({"conv_layers": [1], "tie_embeddings": False, "n_layers": 3}, "Lfm2ForCausalLM"),
    ],
    ids=[
        "qwen3-gqa-tied",
        "qwen3-gqa-untied",
        "llama-mqa-tied",
        "llama-mha-untied",
        "qwen3-gain3",
        "lfm2-conv-first",
        "lfm2-conv-middle-untied",
    ],
)
@pytest.mark.filterwarnings("ignore:.*no tokenizer files")
def test_transformers_computes_enlace_logits(tmp_path, tiny_config, perturb_norms, overrides, arch):
    cfg = tiny_config(vocab_size=256, rope_theta=5000.0, norm_eps=1e-5, **overrides)
    model, run = make_checkpoint(tmp_path, cfg, perturb_norms)
    out = export_hf(run, tmp_path / "hf")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [arch]
    assert {"model.safetensors", "generation_config.json", "config.json"} <= {
        p.name for p in out.iterdir()
    }
    idx = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        want = model(idx).logits
    torch.testing.assert_close(hf_logits(out, idx), want, rtol=1e-5, atol=1e-5)
    # ... and the folder loads back into Enlace, same config, same logits (the q/k gains' initial
    # value is how training started, not part of the network: the weights carry the gains).
    assert config_from_hf(out / "config.json") == cfg.model_copy(update={"qk_norm_gain_init": 1.0})
    with torch.no_grad():
        torch.testing.assert_close(load_model(out)(idx).logits, want, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore:.*no tokenizer files")
def test_generate_with_the_exported_config_stays_within_the_context(tmp_path, tiny_config):
    """Issue 31: generation_config.json allowed context_length new tokens after any prompt, so a
    plain generate() ran past the trained context (where Enlace slides its window instead)."""
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(vocab_size=256, context_length=48)
    _, run = make_checkpoint(tmp_path, cfg, lambda model: None)
    out = export_hf(run, tmp_path / "hf")  # no tokenizer: no eos, generation never stops early
    hf = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    for prompt in (1, 10, cfg.context_length - 1):
        ids = torch.randint(0, 256, (1, prompt))
        assert hf.generate(ids, do_sample=False).shape == (1, cfg.context_length), prompt


def write_run_config(run: Path, **data: object) -> None:
    """The resolved config.yaml the trainer writes into a run directory (the parts the card reads)."""
    config = {"run": {"name": "prueba"}, "data": {"path": "data/x", **data}, "train": {}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))


@pytest.mark.filterwarnings("ignore:.*no tokenizer files")
def test_the_card_says_base_or_chat_from_the_runs_data(tmp_path, tiny_config):
    """Issue 31: every card said «Modelo de conversación», because every tokenizer carries the chat
    template; what the checkpoint is comes from the run's data.kind (chat: fine-tuned on
    conversations)."""
    cfg = tiny_config(vocab_size=300)
    run = tmp_path / "run"
    with atomic_checkpoint(run, 7) as d:
        save_model(d, build_model(cfg), cfg)
        write_tokenizer_files(d, 300, eot_id=1)  # with the chat template
    card = lambda: (export_hf(run, tmp_path / "hf") / "README.md").read_text()  # noqa: E731
    write_run_config(run, kind="shards")
    base = card()
    assert "**Modelo base**" in base and "Modelo de conversación" not in base
    assert "(paso 7)" in base and "# prueba" in base
    write_run_config(run, kind="chat", tokenizer="tok")
    (run / "config.yaml").write_text(
        (run / "config.yaml").read_text().replace("train: {}", "train: {init_from: runs/base}")
    )
    chat = card()
    assert "**Modelo de conversación**" in chat and "`runs/base`" in chat
    assert "- conversational" in chat and "- conversational" not in base  # the Hub's tag
    (run / "config.yaml").unlink()
    unknown = card()
    assert "No consta si es un modelo base o de conversación" in unknown
    # checkpoints/best (no step in its name) is inside the run directory too.
    write_run_config(run, kind="bytes")
    with atomic_checkpoint(run, 9, name="best") as d:
        save_model(d, build_model(cfg), cfg)
    best = (export_hf(run / "checkpoints" / "best", tmp_path / "hf2") / "README.md").read_text()
    assert "**Modelo base**" in best and "texto en bytes UTF-8" in best


def write_tokenizer_files(d: Path, vocab_size: int, eot_id: int | None) -> None:
    """Stand-ins for what enlace-data's Tokenizer.save writes (enlace-model reads the
    description's vocab_size and eot_id, and the special tokens' ids; tests/test_e2e_export.py
    uses the real ones)."""
    added = [{"id": eot_id, "content": "<|endoftext|>", "special": True}] if eot_id else []
    tokenizer = {"model": {"type": "BPE", "vocab": {}}, "added_tokens": added}
    (d / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = {
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "chat_template": "{{ messages }}",
    }
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    (d / "tokenizer.model").write_bytes(b"sentencepiece")
    description = {"kind": "sentencepiece", "vocab_size": vocab_size, "eot_id": eot_id}
    (d / "enlace_tokenizer.json").write_text(json.dumps(description))


def test_export_copies_the_tokenizer_files(tmp_path, tiny_config, perturb_norms):
    cfg = tiny_config(vocab_size=300)
    model = build_model(cfg)
    with atomic_checkpoint(tmp_path / "run", 1) as d:
        save_model(d, model, cfg)
        write_tokenizer_files(d, 300, eot_id=1)
    out = export_hf(tmp_path / "run", tmp_path / "hf")
    for name in ("tokenizer.json", "tokenizer.model", "enlace_tokenizer.json"):
        assert (out / name).read_bytes() == (d.parent / "step_1" / name).read_bytes()
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config == {
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "bos_token": "<|endoftext|>",  # named where the files name none: config.json's bos
        "chat_template": "{{ messages }}",
        "model_max_length": cfg.context_length,
    }
    hf_config = json.loads((out / "config.json").read_text())
    assert [hf_config[f"{role}_token_id"] for role in ("bos", "eos", "pad")] == [1, 1, 1]
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 1 and generation["pad_token_id"] == 1
    # prompt + new tokens within the context (not transformers' 20, nor a context after the prompt)
    assert generation["max_length"] == cfg.context_length and "max_new_tokens" not in generation
    card = (out / "README.md").read_text()
    assert "language:\n- es" in card and "license: mit" in card and "llama-server" in card
    assert "SentencePiece BPE de 300 piezas" in card
    assert f"max_length = {cfg.context_length}" in card


def test_export_refuses_a_tokenizer_of_another_vocabulary_or_an_old_one(tmp_path, tiny_config):
    cfg = tiny_config(vocab_size=300)
    with atomic_checkpoint(tmp_path / "run", 1) as d:
        save_model(d, build_model(cfg), cfg)
    tok = tmp_path / "tok"
    tok.mkdir()
    write_tokenizer_files(tok, 600, eot_id=1)
    with pytest.raises(CheckpointError, match="vocabulary 600 beside a model with vocab_size 300"):
        export_hf(tmp_path / "run", tmp_path / "hf", tokenizer=tok)
    old = tmp_path / "old"
    old.mkdir()
    (old / "tokenizer.json").write_text(json.dumps({"kind": "sentencepiece", "special_ids": {}}))
    with pytest.raises(CheckpointError, match=r"enlace-data tokenizer .* --save"):
        export_hf(tmp_path / "run", tmp_path / "hf", tokenizer=old)
    with pytest.warns(UserWarning, match="no tokenizer files"):
        export_hf(tmp_path / "run", tmp_path / "hf")


def test_export_refuses_tensors_that_disagree_with_model_json(tmp_path, tiny_config, capsys):
    """Issue 21: a checkpoint whose model.json says another shape than its tensors (hashes
    recomputed, so it verifies) must not be exported."""
    cfg = tiny_config(vocab_size=256)
    run = tmp_path / "run"
    with atomic_checkpoint(run, 1) as d:
        save_model(d, build_model(cfg), cfg)
        meta = json.loads((d / "model.json").read_text())
        meta["config"]["ffn_hidden"] += 16
        (d / "model.json").write_text(json.dumps(meta))
    assert cli_main(["export", str(run), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "step_1" in err and "layers.0.mlp.gate_proj.weight" in err and "Traceback" not in err
    assert not (tmp_path / "hf").exists()


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
