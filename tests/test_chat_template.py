"""The chat format is written once: transformers' `apply_chat_template` on an exported folder gives
exactly the token ids of enlace-data's renderer, for the byte and the SentencePiece tokenizer, on
many conversations (system or not, multi-turn, tool calls with nested JSON and non-ASCII
arguments, several calls and results, generation prompt on and off)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from enlace_config.schema.model import ModelConfig
from enlace_data.chat import CHAT_TEMPLATE, normalize_conversation, render, render_text
from enlace_data.chat.builtin import builtin_conversations
from enlace_data.sample import builtin_split
from enlace_data.tokenizer import ByteTokenizer, Tokenizer, train_tokenizer
from enlace_model import atomic_checkpoint, build_model, save_model
from enlace_model.export import export_hf

transformers = pytest.importorskip("transformers", reason="transformers is in the dev group")

TOOL = {
    "type": "function",
    "function": {
        "name": "buscar_en_internet",
        "description": "Busca en internet: «noticias», ñ, 😀.",
        "parameters": {
            "type": "object",
            "properties": {"consulta": {"type": "string"}, "max": {"type": "integer"}},
            "required": ["consulta"],
        },
    },
}
CALENDAR = {"type": "function", "function": {"name": "agenda", "parameters": {"type": "object"}}}


def _call(name: str, args: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": args}}


def handmade() -> list[dict[str, Any]]:
    nested = {
        "filtro": {"fechas": ["2026-01-01", "2026-12-31"], "idioma": "es", "n": [1, 2.5, None]}
    }
    return [
        {"messages": [{"role": "user", "content": "Hola"}, {"role": "assistant", "content": "¡Hola!"}]},
        {"messages": [
            {"role": "system", "content": "Eres Enlace.\nSé breve."},
            {"role": "user", "content": "¿Qué es la fotosíntesis?\n\nExplícalo."},
            {"role": "assistant", "content": "Es cómo las plantas\nhacen su alimento."},
            {"role": "user", "content": "¿Y en una frase?"},
            {"role": "assistant", "content": "Luz → azúcar. 🌱"},
        ]},
        {"messages": [
            {"role": "user", "content": "Busca «paella» y mi agenda"},
            {"role": "assistant", "content": "Voy.", "tool_calls": [
                _call("buscar_en_internet", {"consulta": "receta paella valenciana", "max": 3}),
                _call("agenda", nested),
            ]},
            {"role": "tool", "content": "[1] Paella — https://ejemplo.es/\n    Arroz, pollo, judía."},
            {"role": "tool", "content": "{\"eventos\": []}"},
            {"role": "assistant", "content": "Según ejemplo.es: arroz, pollo y judía."},
        ], "tools": [TOOL, CALENDAR]},
        {"messages": [
            {"role": "system", "content": "Usa herramientas."},
            {"role": "user", "content": "¿Tiempo en A Coruña?"},
            {"role": "assistant", "content": "", "tool_calls": [
                _call("buscar_en_internet", '{"consulta": "tiempo A Coruña", "extra": {"a": [1, {"b": "ü"}]}}'),
            ]},
            {"role": "tool", "content": "Lluvia."},
            {"role": "assistant", "content": "Llueve."},
            {"role": "user", "content": "¿Y mañana?"},
            {"role": "assistant", "content": "", "tool_calls": [_call("buscar_en_internet", {"consulta": "mañana"})]},
        ], "tools": [TOOL]},
        {"messages": [
            {"role": "user", "content": "Texto con <tools> y </tools> y \"comillas\" y \\barras\\"},
            {"role": "assistant", "content": "  espacios  \t"},
        ], "tools": [CALENDAR]},
    ]  # fmt: skip


def conversations() -> list[dict[str, Any]]:
    convs = (
        handmade() + builtin_conversations("train", 30, seed=7) + builtin_conversations("val", 15)
    )
    out = [normalize_conversation(c, "test") for c in convs]
    # Prefixes that end at a user or tool turn: what a chat asks the model to continue.
    for c in list(out):
        for i, m in enumerate(c["messages"]):
            following = c["messages"][i + 1]["role"] if i + 1 < len(c["messages"]) else None
            if m["role"] in ("user", "tool") and following == "assistant":
                out.append({**c, "messages": copy.deepcopy(c["messages"][: i + 1])})
                break
    return out


def export_with(tokenizer: Any, vocab_size: int, tmp_path: Path) -> Path:
    cfg = ModelConfig(
        vocab_size=vocab_size,
        context_length=64,
        d_model=32,
        n_layers=1,
        n_heads=2,
        n_kv_heads=1,
        ffn_hidden=64,
    )
    with atomic_checkpoint(tmp_path / "run", 1) as d:
        save_model(d, build_model(cfg), cfg)
        tokenizer.save(d)
    return export_hf(tmp_path / "run", tmp_path / "hf")


def hf_ids(tok: Any, conv: dict[str, Any], generation_prompt: bool) -> list[int]:
    out = tok.apply_chat_template(
        conv["messages"],
        tools=conv.get("tools"),
        add_generation_prompt=generation_prompt,
        tokenize=True,
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@pytest.fixture(scope="module")
def sentencepiece(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    text = builtin_split("val")[:200_000].decode("utf-8", errors="ignore")
    lines = [line for line in text.splitlines() if line.strip()]
    return train_tokenizer(lines, vocab_size=700)


@pytest.mark.parametrize("kind", ["bytes", "sentencepiece"])
def test_apply_chat_template_gives_enlace_ids(kind: str, tmp_path: Path, request: Any) -> None:
    from transformers import AutoTokenizer

    tokenizer = ByteTokenizer() if kind == "bytes" else request.getfixturevalue("sentencepiece")
    vocab = 264 if kind == "bytes" else tokenizer.vocab_size
    folder = export_with(tokenizer, vocab, tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["chat_template"] == CHAT_TEMPLATE
    hf = AutoTokenizer.from_pretrained(folder)
    convs = conversations()
    assert len(convs) >= 50
    checked = 0
    for conv in convs:
        for generation_prompt in (False, True):
            want = render(
                conv["messages"],
                tokenizer,
                tools=conv.get("tools"),
                add_generation_prompt=generation_prompt,
            ).ids
            text = render_text(
                conv["messages"], tools=conv.get("tools"), add_generation_prompt=generation_prompt
            )
            assert hf_ids(hf, conv, generation_prompt) == want, text
            checked += 1
    assert checked >= 100
    gen = json.loads((folder / "generation_config.json").read_text())
    assert tokenizer.special_ids["<|im_end|>"] in gen["eos_token_id"]
