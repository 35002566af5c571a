"""Export to a Hugging Face folder (Qwen3 architecture), and read such a folder back.

The model follows Hugging Face's conventions (rotary on halves, per-head QK-norm before the
rotation, no biases, SwiGLU), so the export is a renaming of keys, never a permutation:

    embed.weight                  → model.embed_tokens.weight
    layers.{i}.attn_norm.weight   → model.layers.{i}.input_layernorm.weight
    layers.{i}.attn.*             → model.layers.{i}.self_attn.*   (q/k/v/o_proj, q_norm, k_norm)
    layers.{i}.mlp_norm.weight    → model.layers.{i}.post_attention_layernorm.weight
    layers.{i}.mlp.*              → model.layers.{i}.mlp.*         (gate/up/down_proj)
    norm.weight                   → model.norm.weight
    lm_head.weight                → lm_head.weight  (untied heads; tied ones have none)

A model with QK-norm is exported as `Qwen3ForCausalLM`; one without (qk_norm: false) as
`LlamaForCausalLM`, which is the same network minus the q/k norms.

The folder gets config.json, model.safetensors, generation_config.json and the tokenizer:
- a SentencePiece run (tokenizer.model in the checkpoint): a `tokenizer.json` for the `tokenizers`
  library, converted here from the SentencePiece model (BPE with byte fallback, its merges, the
  special tokens as added tokens), plus tokenizer_config.json, special_tokens_map.json and a copy of
  tokenizer.model. `AutoTokenizer.from_pretrained(folder)` then gives Enlace's ids. One known
  difference: Enlace encodes a literal U+2581 ('▁') in the text as its three UTF-8 byte tokens;
  the tokenizers library treats it as a space marker.
- a byte-level run (vocabulary 256, no tokenizer.model): a byte-level BPE `tokenizer.json` without
  merges whose id for each byte is the byte value.

Nothing here needs transformers, tokenizers or sentencepiece: the JSON files are written directly
(the SentencePiece model is read with a small protobuf reader).
"""

from __future__ import annotations

import json
import os
import re
import struct
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from enlace_config.schema.model import ModelConfig
from pydantic import ValidationError
from torch import Tensor

from enlace_model.checkpoint import (
    CHAT_TEMPLATE_FILE,
    CONFIG_FILE,
    HF_CONFIG_FILE,
    HF_TOKENIZER_CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_INFO_FILE,
    TOKENIZER_MODEL_FILE,
    load_state_dict,
    read_model_config,
    resolve_checkpoint,
    write_safetensors,
)
from enlace_model.errors import CheckpointError
from enlace_model.model_card import model_card

__all__ = [
    "WEIGHTS_LICENSE",
    "chat_template",
    "config_from_hf",
    "export_hf",
    "hf_config",
    "state_dict_from_hf",
    "state_dict_to_hf",
    "token_id",
    "tokenizer_files",
]

PathLike = str | os.PathLike[str]

# (Enlace pattern, Hugging Face pattern); {i} is the layer index.
_RENAMES: tuple[tuple[str, str], ...] = (
    (r"embed\.weight", "model.embed_tokens.weight"),
    (r"layers\.(\d+)\.attn_norm\.weight", r"model.layers.\1.input_layernorm.weight"),
    (r"layers\.(\d+)\.attn\.(.+)", r"model.layers.\1.self_attn.\2"),
    (r"layers\.(\d+)\.mlp_norm\.weight", r"model.layers.\1.post_attention_layernorm.weight"),
    (r"layers\.(\d+)\.mlp\.(.+)", r"model.layers.\1.mlp.\2"),
    (r"norm\.weight", "model.norm.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
)
_HF_RENAMES: tuple[tuple[str, str], ...] = (
    (r"model\.embed_tokens\.weight", "embed.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"layers.\1.attn_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.(.+)", r"layers.\1.attn.\2"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"layers.\1.mlp_norm.weight"),
    (r"model\.layers\.(\d+)\.mlp\.(.+)", r"layers.\1.mlp.\2"),
    (r"model\.norm\.weight", "norm.weight"),
    (r"lm_head\.weight", "lm_head.weight"),
)


def _rename(name: str, table: tuple[tuple[str, str], ...]) -> str:
    for pattern, repl in table:
        if re.fullmatch(pattern, name):
            return re.sub(f"^{pattern}$", repl, name)
    raise CheckpointError(f"tensor {name!r} has no Hugging Face counterpart")


def state_dict_to_hf(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {_rename(k, _RENAMES): v for k, v in state.items()}


def state_dict_from_hf(state: Mapping[str, Tensor], tie_embeddings: bool) -> dict[str, Tensor]:
    """Enlace names for a Hugging Face Qwen3/Llama state dict. For a tied model, a redundant
    lm_head.weight (some tools save it) is dropped."""
    out = {_rename(k, _HF_RENAMES): v for k, v in state.items()}
    if tie_embeddings:
        out.pop("lm_head.weight", None)
    return out


# --- config -------------------------------------------------------------------------------------
def hf_config(cfg: ModelConfig, *, eos_token_id: int | None = None) -> dict[str, Any]:
    """config.json for a model of this config: Qwen3 with QK-norm, Llama without."""
    arch = "Qwen3ForCausalLM" if cfg.qk_norm else "LlamaForCausalLM"
    out: dict[str, Any] = {
        "architectures": [arch],
        "model_type": "qwen3" if cfg.qk_norm else "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ffn_hidden,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.context_length,
        "rms_norm_eps": cfg.norm_eps,
        # Both spellings: transformers 5 reads rope_parameters, older tools read rope_theta.
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "tie_word_embeddings": cfg.tie_embeddings,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": cfg.init_std,
        "use_cache": True,
        "torch_dtype": "float32",
        "bos_token_id": eos_token_id,
        "eos_token_id": eos_token_id,
    }
    if cfg.qk_norm:
        out |= {"use_sliding_window": False, "sliding_window": None}
        out["max_window_layers"] = cfg.n_layers
    else:
        out |= {"mlp_bias": False, "pretraining_tp": 1}
    return out


def config_from_hf(path: PathLike) -> ModelConfig:
    """The ModelConfig of an exported folder's config.json (Qwen3 or Llama, as written here)."""
    f = Path(path)
    try:
        c = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{f}: cannot read the Hugging Face config ({e})") from e
    kind = c.get("model_type")
    if kind not in ("qwen3", "llama"):
        raise CheckpointError(f"{f}: model_type {kind!r}; Enlace reads qwen3 and llama folders")
    problems = []
    if c.get("hidden_act", "silu") != "silu":
        problems.append(f"hidden_act {c.get('hidden_act')!r} (need silu)")
    if c.get("attention_bias") or c.get("mlp_bias"):
        problems.append("biases (Enlace has none)")
    if c.get("use_sliding_window"):
        problems.append("sliding-window attention")
    rope = c.get("rope_parameters") or {}
    if c.get("rope_scaling") or rope.get("rope_type", "default") != "default":
        problems.append("rope scaling")
    heads = c.get("num_attention_heads", 0)
    if heads and c.get("head_dim", c["hidden_size"] // heads) * heads != c["hidden_size"]:
        problems.append("head_dim * num_attention_heads != hidden_size")
    if problems:
        raise CheckpointError(f"{f}: not an architecture Enlace can run: {'; '.join(problems)}")
    try:
        return ModelConfig(
            vocab_size=c["vocab_size"],
            context_length=c["max_position_embeddings"],
            d_model=c["hidden_size"],
            n_layers=c["num_hidden_layers"],
            n_heads=heads,
            n_kv_heads=c.get("num_key_value_heads") or heads,
            ffn_hidden=c["intermediate_size"],
            rope_theta=rope.get("rope_theta", c.get("rope_theta", 10000.0)),
            norm_eps=c.get("rms_norm_eps", 1e-6),
            qk_norm=kind == "qwen3",
            tie_embeddings=c.get("tie_word_embeddings", False),
            init_std=c.get("initializer_range", 0.02),
        )
    except (KeyError, ValidationError) as e:
        raise CheckpointError(f"{f}: incomplete or invalid config ({e})") from e


# --- tokenizer files ----------------------------------------------------------------------------
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (the ByteLevel alphabet)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def byte_tokenizer_json() -> dict[str, Any]:
    """A tokenizers-library tokenizer whose ids are the UTF-8 byte values (no merges)."""
    alphabet = _bytes_to_unicode()
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {alphabet[b]: b for b in range(256)},
            "merges": [],
        },
    }


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs of one protobuf message, wire format only."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield num, value
        elif wire == 1:
            yield num, buf[pos : pos + 8]
            pos += 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            yield num, buf[pos : pos + n]
            pos += n
        elif wire == 5:
            yield num, buf[pos : pos + 4]
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


# SentencePiece piece types (sentencepiece_model.proto).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6


def _read_sentencepiece(proto: bytes) -> tuple[list[tuple[str, float, int]], dict[str, Any]]:
    """The pieces (piece, score, type) and the options that matter for the conversion."""
    pieces: list[tuple[str, float, int]] = []
    trainer: dict[int, Any] = {}
    normalizer: dict[int, Any] = {}
    for num, value in _fields(proto):
        if num == 1 and isinstance(value, bytes):
            f = dict(_fields(value))
            piece = f.get(1, b"")
            score = f.get(2, b"\0\0\0\0")
            kind = f.get(3, _NORMAL)
            assert isinstance(piece, bytes) and isinstance(score, bytes) and isinstance(kind, int)
            pieces.append((piece.decode("utf-8"), struct.unpack("<f", score)[0], kind))
        elif num == 2 and isinstance(value, bytes):
            trainer.update(_fields(value))
        elif num == 3 and isinstance(value, bytes):
            normalizer.update(_fields(value))
    name = normalizer.get(1, b"")
    opts = {
        "model_type": int(trainer.get(3, 1)),  # 1 unigram, 2 bpe
        "byte_fallback": bool(trainer.get(35, 0)),
        "normalizer": name.decode() if isinstance(name, bytes) else "",
        "add_dummy_prefix": bool(normalizer.get(3, 1)),
        "remove_extra_whitespaces": bool(normalizer.get(4, 1)),
        "escape_whitespaces": bool(normalizer.get(5, 1)),
    }
    return pieces, opts


def sentencepiece_tokenizer_json(proto: bytes, origin: str) -> dict[str, Any]:
    """Convert a SentencePiece BPE model trained the Enlace way (identity normalisation, no dummy
    prefix, byte fallback) into a tokenizers-library tokenizer with the same ids."""
    try:
        pieces, opts = _read_sentencepiece(proto)
    except (ValueError, IndexError, UnicodeDecodeError, AssertionError, struct.error) as e:
        raise CheckpointError(f"{origin}: not a readable SentencePiece model ({e})") from e
    problems = []
    if opts["model_type"] != 2:
        problems.append("not a BPE model")
    if opts["normalizer"] not in ("identity", ""):
        problems.append(f"normaliser {opts['normalizer']!r} (need identity)")
    if opts["add_dummy_prefix"] or opts["remove_extra_whitespaces"]:
        problems.append("add_dummy_prefix/remove_extra_whitespaces on")
    if problems:
        raise CheckpointError(
            f"{origin}: cannot convert this SentencePiece model exactly: {'; '.join(problems)}"
        )
    vocab = {piece: i for i, (piece, _, _) in enumerate(pieces)}
    unk = next((p for p, _, kind in pieces if kind == _UNKNOWN), None)
    # Merges as transformers' SentencePieceExtractor derives them: every split of a mergeable piece
    # into two vocabulary pieces, ordered by the merged piece's rank (its id: SentencePiece sorts
    # BPE pieces by score), then by the ids of the two halves.
    mergeable = {p for p, _, kind in pieces if kind == _NORMAL}
    merges: list[tuple[int, int, int, str, str]] = []
    for piece in mergeable:
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((vocab[piece], vocab[left], vocab[right], left, right))
    merges.sort()
    added = []
    for i, (piece, _, kind) in enumerate(pieces):
        if kind in (_CONTROL, _UNKNOWN, _USER_DEFINED):
            added.append(
                {
                    "id": i,
                    "content": piece,
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": kind != _USER_DEFINED,
                }
            )
    space = "\u2581"
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": (
            {"type": "Replace", "pattern": {"String": " "}, "content": space}
            if opts["escape_whitespaces"]
            else None
        ),
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": space}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": opts["byte_fallback"],
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[left, right] for *_, left, right in merges],
        },
    }


def _special_ids(ckpt: Path) -> dict[str, int]:
    info = ckpt / TOKENIZER_INFO_FILE
    if not info.is_file():
        return {}
    try:
        data = json.loads(info.read_text())
        ids = data.get("special_ids", {})
        return {str(k): int(v) for k, v in ids.items()}
    except (OSError, ValueError, AttributeError, TypeError) as e:
        raise CheckpointError(f"{info}: unreadable tokenizer description ({e})") from e


def _eot_id(ckpt: Path, special: Mapping[str, int]) -> int | None:
    info = ckpt / TOKENIZER_INFO_FILE
    if info.is_file():
        try:
            eot = json.loads(info.read_text()).get("eot_id")
        except (OSError, ValueError, AttributeError):
            eot = None
        if isinstance(eot, int):
            return eot
    return special.get("<|endoftext|>")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


# --- export -------------------------------------------------------------------------------------
# The license the exported weights are published under: the project's own.
WEIGHTS_LICENSE = "mit"


def chat_template(ckpt: Path) -> str | None:
    """The checkpoint's chat template: chat_template.jinja, else a `chat_template` in its
    tokenizer_config.json; None when the model has none (a base model)."""
    jinja = ckpt / CHAT_TEMPLATE_FILE
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = ckpt / HF_TOKENIZER_CONFIG_FILE
    if config.is_file():
        try:
            value = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError) as e:
            raise CheckpointError(f"{config}: unreadable tokenizer config ({e})") from e
        if isinstance(value, str):
            return value
    return None


def tokenizer_files(ckpt: Path, cfg: ModelConfig) -> dict[str, Any]:
    """The tokenizer files of the Hugging Face folder for this checkpoint, by file name: JSON data
    for tokenizer.json, tokenizer_config.json and special_tokens_map.json, bytes for
    tokenizer.model. The GGUF export reads its vocabulary from the same data. Empty, with a
    warning, for a model whose tokenizer is not in the checkpoint."""
    if (ckpt / HF_CONFIG_FILE).is_file() and not (ckpt / CONFIG_FILE).is_file():
        return _hf_folder_tokenizer_files(ckpt)
    sp_model = ckpt / TOKENIZER_MODEL_FILE
    template = chat_template(ckpt)
    common: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": cfg.context_length,
        "clean_up_tokenization_spaces": False,
        # A chat template is rendered as text, then tokenized: its special-token strings must
        # become the special ids. (Enlace's own encode never makes a special id from text; this
        # is the one place the two differ, documented in the model card.)
        "split_special_tokens": False,
    }
    if template is not None:
        common["chat_template"] = template
    if sp_model.is_file():
        proto = sp_model.read_bytes()
        tok = sentencepiece_tokenizer_json(proto, str(sp_model))
        if len(tok["model"]["vocab"]) != cfg.vocab_size:
            raise CheckpointError(
                f"{sp_model}: {len(tok['model']['vocab'])} pieces but the model has "
                f"vocab_size {cfg.vocab_size}"
            )
        special = _special_ids(ckpt)
        eos = _eot_id(ckpt, special)
        eos_piece = next((p for p, i in special.items() if i == eos), None)
        unk = tok["model"]["unk_token"]
        tokens = {"bos_token": eos_piece, "eos_token": eos_piece, "pad_token": eos_piece}
        tokens = {k: v for k, v in tokens.items() if v is not None}
        if unk is not None:
            tokens["unk_token"] = unk
        config = common | {"add_bos_token": False, "add_eos_token": False, **tokens}
        return {
            "tokenizer.json": tok,
            HF_TOKENIZER_CONFIG_FILE: config,
            "special_tokens_map.json": tokens,
            TOKENIZER_MODEL_FILE: proto,
        }
    if cfg.vocab_size == 256:
        return {"tokenizer.json": byte_tokenizer_json(), HF_TOKENIZER_CONFIG_FILE: common}
    warnings.warn(
        f"{ckpt}: no {TOKENIZER_MODEL_FILE} beside a model with vocab_size {cfg.vocab_size}: "
        f"exported without tokenizer files (copy the corpus's tokenizer.model into the "
        f"checkpoint and export again)",
        stacklevel=3,
    )
    return {}


def _hf_folder_tokenizer_files(folder: Path) -> dict[str, Any]:
    """The tokenizer files of an exported folder as they are, also after transformers'
    `save_pretrained` (which drops tokenizer.model: tokenizer.json carries everything needed)."""
    files: dict[str, Any] = {}
    for name in ("tokenizer.json", HF_TOKENIZER_CONFIG_FILE):
        f = folder / name
        if f.is_file():
            try:
                files[name] = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise CheckpointError(f"{f}: unreadable ({e})") from e
    if "tokenizer.json" not in files:
        return {}
    template = chat_template(folder)
    if template is not None:
        files.setdefault(HF_TOKENIZER_CONFIG_FILE, {})["chat_template"] = template
    return files


def token_id(files: Mapping[str, Any], role: str) -> int | None:
    """The id of a tokenizer role (bos_token, eos_token, pad_token, unk_token) in the files of
    `tokenizer_files`, or None."""
    piece = files.get(HF_TOKENIZER_CONFIG_FILE, {}).get(role)
    if piece is None:
        return None
    return files["tokenizer.json"]["model"]["vocab"][piece]


def export_hf(checkpoint: PathLike, out_dir: PathLike) -> Path:
    """Write a Hugging Face folder for a checkpoint (or a run directory's newest). Returns it."""
    ckpt = resolve_checkpoint(checkpoint)
    if (ckpt / HF_CONFIG_FILE).is_file() and not (ckpt / "model.json").is_file():
        raise CheckpointError(f"{ckpt}: already an exported Hugging Face folder")
    cfg = read_model_config(ckpt)
    state = load_state_dict(ckpt)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not (out / HF_CONFIG_FILE).is_file():
        raise CheckpointError(
            f"{out}: exists and is not an earlier export; choose an empty or new directory"
        )
    out.mkdir(parents=True, exist_ok=True)

    files = tokenizer_files(ckpt, cfg)
    eos, pad = token_id(files, "eos_token"), token_id(files, "pad_token")
    write_safetensors(out / MODEL_FILE, state_dict_to_hf(state), {"format": "pt"})
    config = hf_config(cfg, eos_token_id=eos) | {"pad_token_id": pad}
    _write_json(out / HF_CONFIG_FILE, config)
    # A plain generate() should not stop after transformers' default of 20 new tokens: allow a
    # whole context's worth, the longest continuation the model was trained to attend over.
    generation: dict[str, Any] = {"do_sample": False, "max_new_tokens": cfg.context_length}
    if eos is not None:
        generation |= {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": pad}
    _write_json(out / "generation_config.json", generation)
    for name, data in files.items():
        if isinstance(data, bytes):
            (out / name).write_bytes(data)
        else:
            _write_json(out / name, data)
    (out / "README.md").write_text(model_card(ckpt, cfg, state, files), encoding="utf-8")
    return out
