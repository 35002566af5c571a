"""Export to GGUF, the file llama.cpp runs, written with the `gguf` library (llama.cpp's own),
straight from a checkpoint or run directory: no Hugging Face folder and no converter in between.

- Architecture `qwen3` (QK-norm), llama.cpp's name for exactly our layout. A model without QK-norm
  is `llama`, whose rotary rotates interleaved pairs: its q/k rows are permuted as llama.cpp's
  converter does. A model with short-convolution layers is `lfm2`: its convolution layers are the
  ones with no key/value heads (a per-layer array), the kernel is stored (C, K). Tensor names go
  through the Hugging Face names (hf.py) and gguf's name table.
- Tokenizer from the checkpoint's files (checkpoint.TOKENIZER_FILES): vocabulary from
  tokenizer.json, the special ids (bos, eos, padding, unknown) those of the Hugging Face export
  (export.special_token_ids: a byte-level file names bos too, or llama.cpp takes id 11):
  * SentencePiece: llama.cpp's `llama` tokenizer, every piece with its type and a score of minus
    its id (SentencePiece's BPE pieces are sorted by score); `add_space_prefix` false (llama.cpp's
    default, true, changes every prompt); byte fallback through the `<0xNN>` pieces.
  * bytes: a `gpt2` vocabulary whose token i is byte i and no merge that can apply, so every string
    tokenizes to its UTF-8 bytes, U+2581 included. GGUF cannot hold an empty array and llama.cpp
    requires the merges key, so one inert merge of two multi-character strings is written.
  * the chat template, when the checkpoint has one.
- Weights `f32`, `f16`, `q8_0` or `q4_0` (token embedding kept in q8_0), by gguf's quantizer; norms
  and convolution kernels stay f32, and a matrix whose rows do not fill whole quantization blocks
  falls back to f16, as llama.cpp's converter does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_config.schema.model import ModelConfig
from torch import Tensor

from enlace_model.checkpoint import (
    HF_TOKENIZER_CONFIG_FILE,
    HF_TOKENIZER_FILE,
    PathLike,
    atomic_file,
    load_state_dict,
    read_model_config,
    resolve_checkpoint,
)
from enlace_model.errors import CheckpointError
from enlace_model.export import chat_template as saved_chat_template
from enlace_model.export import read_json, special_token_ids, tokenizer_description
from enlace_model.hf import architecture, state_dict_to_hf
from enlace_model.model_card import WEIGHTS_LICENSE

if TYPE_CHECKING:
    import numpy as np

__all__ = ["GGUF_TYPES", "export_gguf", "gguf_tensor_names"]

GGUF_TYPES = ("f32", "f16", "q8_0", "q4_0")
INERT_MERGE = "<0x00> <0x00>"  # see the module docstring: never applies to one-character symbols
# The pre-tokenizer of the Qwen family: with no merges its split changes no id, and unlike
# "default" it does not "clean up" spaces before punctuation when llama.cpp detokenizes.
BYTE_PRE_TOKENIZER = "qwen2"
_END_OF_TURN = "<|im_end|>"  # ChatML, enlace-data's chat format


def gguf_tensor_names(cfg: ModelConfig, names: list[str]) -> dict[str, str]:
    """GGUF tensor name for each Enlace state-dict key, through gguf's table of HF names."""
    import gguf

    table = gguf.get_tensor_name_map(_gguf_arch(cfg), cfg.n_layers)
    hf = state_dict_to_hf(dict.fromkeys(names), cfg)  # type: ignore[arg-type]
    out = {}
    for enlace, hf_name in zip(names, hf, strict=True):
        gguf_name = table.get_name(hf_name, try_suffixes=(".weight",))
        if gguf_name is None:
            raise CheckpointError(f"tensor {enlace!r} ({hf_name}) has no GGUF name")
        out[enlace] = gguf_name
    return out


def _gguf_arch(cfg: ModelConfig) -> Any:
    import gguf

    return gguf.MODEL_ARCH[architecture(cfg).upper()]  # LFM2, QWEN3 or LLAMA


def _permute_rotary(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of q or k from the halves convention to llama's interleaved pairs (llama.cpp's
    converter's `permute`)."""
    return (
        w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _quantize(name: str, w: np.ndarray, outtype: str) -> tuple[np.ndarray, Any]:
    """(data, GGML type) for one tensor."""
    import gguf
    import numpy as np

    types = gguf.GGMLQuantizationType
    # llama.cpp's convolution kernel (ggml_ssm_conv) reads float32 weights only.
    if w.ndim < 2 or outtype == "f32" or name.endswith("shortconv.conv.weight"):
        return w.astype(np.float32), types.F32
    wanted = types[outtype.upper()]  # F16, Q8_0, Q4_0
    if wanted == types.Q4_0 and name == "token_embd.weight":
        wanted = types.Q8_0  # the embedding (and tied head) loses most from 4 bits
    if wanted != types.F16 and w.shape[-1] % gguf.GGML_QUANT_SIZES[wanted][0]:
        wanted = types.F16
    return gguf.quantize(w, wanted), wanted


def _tensors(cfg: ModelConfig, state: Mapping[str, Tensor], outtype: str):
    """(gguf name, data, GGML type) for every tensor, in the checkpoint's order."""
    names = gguf_tensor_names(cfg, list(state))
    for key, t in state.items():
        w = t.detach().float().cpu().numpy()
        if not cfg.qk_norm and key.endswith(("attn.q_proj.weight", "attn.k_proj.weight")):
            w = _permute_rotary(w, cfg.n_heads if "q_proj" in key else cfg.n_kv_heads)
        if key.endswith("conv.conv_weight"):
            w = w[:, 0]  # (C, 1, K) → (C, K): llama.cpp's {K, C}
        data, qtype = _quantize(names[key], w, outtype)
        yield names[key], data, qtype


def _add_hyperparameters(w: Any, cfg: ModelConfig, name: str, outtype: str) -> None:
    import gguf

    w.add_name(name)
    w.add_license(WEIGHTS_LICENSE)
    w.add_languages(["es"])
    w.add_file_type(
        gguf.LlamaFileType[{"f32": "ALL_F32"}.get(outtype, f"MOSTLY_{outtype.upper()}")]
    )
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.context_length)
    w.add_embedding_length(cfg.d_model)
    w.add_block_count(cfg.n_layers)
    w.add_feed_forward_length(cfg.ffn_hidden)
    w.add_head_count(cfg.n_heads)
    if cfg.conv_layers:  # LFM2: a layer without key/value heads is a convolution
        kv_heads = [0 if i in cfg.conv_layers else cfg.n_kv_heads for i in range(cfg.n_layers)]
        w.add_head_count_kv(kv_heads)
        w.add_shortconv_l_cache(cfg.conv_kernel)
    else:
        w.add_head_count_kv(cfg.n_kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(cfg.norm_eps)


def _vocabulary(
    tok: Mapping[str, Any], vocab_size: int
) -> tuple[str, list[str], list[float], list[int]]:
    """(tokenizer model, tokens, scores, types) from a Hugging Face tokenizer.json, padded with
    unused tokens to the model's rows (a model may have more rows than its tokenizer has ids)."""
    import gguf

    kinds = gguf.TokenType
    model = tok["model"]
    by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    added = {a["id"]: a for a in tok.get("added_tokens", [])}
    tokens = [piece for piece, _ in by_id] + [
        added[i]["content"] for i in sorted(added) if i >= len(by_id)
    ]
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise CheckpointError("tokenizer.json: the vocabulary ids are not 0..n-1")
    tokens += [f"[PAD{i}]" for i in range(len(tokens), vocab_size)]  # as llama.cpp's converter
    byte_fallback = bool(model.get("byte_fallback"))
    types, scores = [], []
    for i, piece in enumerate(tokens):
        a = added.get(i)
        if i >= len(by_id) and a is None:
            kind = kinds.UNUSED
        elif a is not None and piece == model.get("unk_token"):
            kind = kinds.UNKNOWN
        elif a is not None:
            kind = kinds.CONTROL if a.get("special") else kinds.USER_DEFINED
        elif byte_fallback and len(piece) == 6 and piece.startswith("<0x") and piece[-1] == ">":
            kind = kinds.BYTE
        else:
            kind = kinds.NORMAL
        types.append(int(kind))
        scores.append(-float(i) if kind == kinds.NORMAL else 0.0)
    if byte_fallback:
        return "llama", tokens, scores, types
    if model.get("merges"):
        raise CheckpointError(
            "tokenizer.json: a byte-level BPE with merges has no exact llama.cpp pre-tokenizer here"
        )
    return "gpt2", tokens, scores, types


def _tokenizer_files(ckpt: Path, cfg: ModelConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(tokenizer.json, tokenizer_config.json) of the checkpoint, as enlace-data wrote them."""
    tokenizer_description(ckpt, cfg.vocab_size)  # refuses another vocabulary or old files
    tok_file = ckpt / HF_TOKENIZER_FILE
    if not tok_file.is_file():
        raise CheckpointError(
            f"{ckpt}: no tokenizer to put in the GGUF file (llama.cpp needs one, from "
            f"{HF_TOKENIZER_FILE}); write the tokenizer files with `enlace-data tokenizer "
            f"CORPUS_DIR --save {ckpt}` and export again"
        )
    config_file = ckpt / HF_TOKENIZER_CONFIG_FILE
    config = read_json(config_file) if config_file.is_file() else {}
    tok = read_json(tok_file)
    ids = set(tok["model"]["vocab"].values()) | {a["id"] for a in tok.get("added_tokens", [])}
    if len(ids) > cfg.vocab_size:
        raise CheckpointError(
            f"{tok_file}: {len(ids)} tokens but the model has vocab_size {cfg.vocab_size}"
        )
    return tok, config


def _add_tokenizer(
    w: Any, tok: Mapping[str, Any], config: Mapping[str, Any], template: str | None, vocab_size: int
) -> None:
    kind, tokens, scores, types = _vocabulary(tok, vocab_size)
    w.add_tokenizer_model(kind)
    w.add_token_list(tokens)
    w.add_token_types(types)
    if kind == "llama":
        w.add_token_scores(scores)
        w.add_add_space_prefix(False)
        w.add_remove_extra_whitespaces(False)
    else:
        w.add_tokenizer_pre(BYTE_PRE_TOKENIZER)
        w.add_token_merges([INERT_MERGE])
    for role, i in special_token_ids(tok, config).items():
        getattr(w, f"add_{role}_token_id")(i)
    if _END_OF_TURN in tokens:
        w.add_eot_token_id(tokens.index(_END_OF_TURN))
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    if template:
        w.add_chat_template(template)


def export_gguf(
    checkpoint: PathLike,
    out_file: PathLike,
    *,
    outtype: str = "f16",
    chat_template: str | None = None,
) -> Path:
    """Write one GGUF file for a checkpoint (or a run directory's newest). `outtype`: one of
    GGUF_TYPES. `chat_template` overrides the checkpoint's own. Written to a temporary name and
    renamed, so a failed export leaves no partial file. Returns the path."""
    import gguf

    if outtype not in GGUF_TYPES:
        raise CheckpointError(f"GGUF type {outtype!r}: choose one of {', '.join(GGUF_TYPES)}")
    ckpt = resolve_checkpoint(checkpoint)
    cfg = read_model_config(ckpt)
    state = load_state_dict(ckpt)
    tok, tok_config = _tokenizer_files(ckpt, cfg)
    out = Path(out_file)
    if out.is_dir():
        raise CheckpointError(f"{out}: is a directory; give the .gguf file to write")
    out.parent.mkdir(parents=True, exist_ok=True)
    arch = gguf.MODEL_ARCH_NAMES[_gguf_arch(cfg)]
    with atomic_file(out) as tmp:
        writer = gguf.GGUFWriter(tmp, arch)
        try:
            _add_hyperparameters(writer, cfg, f"enlace-{ckpt.name}", outtype)
            template = chat_template or saved_chat_template(ckpt)
            _add_tokenizer(writer, tok, tok_config, template, cfg.vocab_size)
            for name, data, qtype in _tensors(cfg, state, outtype):
                writer.add_tensor(name, data, raw_dtype=qtype)
            writer.write_header_to_file()
            writer.write_kv_data_to_file()
            writer.write_tensors_to_file()
        finally:
            writer.close()
    return out
