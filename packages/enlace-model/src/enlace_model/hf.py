"""The Hugging Face mapping: Enlace's state-dict keys and config ↔ Qwen3 / Llama / LFM2.

The model follows Hugging Face's conventions (rotary on halves, per-head QK-norm before the
rotation, no biases, SwiGLU), so the mapping is a renaming of keys, never a permutation. A model
with QK-norm maps to `Qwen3ForCausalLM`; one without to `LlamaForCausalLM`, the same network minus
the q/k norms; one with short-convolution layers (`conv_layers`) to `Lfm2ForCausalLM`, Liquid AI's
layout of convolution and attention blocks, whose attention always has QK-norm. Used by the export
(writing) and checkpoint.py (reading back).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enlace_config.schema.model import ModelConfig
from pydantic import ValidationError
from torch import Tensor

from enlace_model.errors import CheckpointError

__all__ = ["architecture", "config_from_hf", "hf_config", "state_dict_from_hf", "state_dict_to_hf"]

PathLike = str | os.PathLike[str]

# (Enlace name, Hugging Face name); {i} is the layer index, {rest} the rest of the name. The first
# pair that matches wins, so specific names come before {rest}.
_NAMES: tuple[tuple[str, str], ...] = (
    ("embed.weight", "model.embed_tokens.weight"),
    ("layers.{i}.attn_norm.weight", "model.layers.{i}.input_layernorm.weight"),
    ("layers.{i}.attn.{rest}", "model.layers.{i}.self_attn.{rest}"),
    ("layers.{i}.mlp_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
    ("layers.{i}.mlp.{rest}", "model.layers.{i}.mlp.{rest}"),
    ("norm.weight", "model.norm.weight"),
    ("lm_head.weight", "lm_head.weight"),
)
_LFM2_NAMES: tuple[tuple[str, str], ...] = (
    ("embed.weight", "model.embed_tokens.weight"),
    ("layers.{i}.attn_norm.weight", "model.layers.{i}.operator_norm.weight"),
    ("layers.{i}.attn.o_proj.weight", "model.layers.{i}.self_attn.out_proj.weight"),
    ("layers.{i}.attn.q_norm.weight", "model.layers.{i}.self_attn.q_layernorm.weight"),
    ("layers.{i}.attn.k_norm.weight", "model.layers.{i}.self_attn.k_layernorm.weight"),
    ("layers.{i}.attn.{rest}", "model.layers.{i}.self_attn.{rest}"),
    ("layers.{i}.conv.conv_weight", "model.layers.{i}.conv.conv.weight"),
    ("layers.{i}.conv.{rest}", "model.layers.{i}.conv.{rest}"),
    ("layers.{i}.mlp_norm.weight", "model.layers.{i}.ffn_norm.weight"),
    ("layers.{i}.mlp.gate_proj.weight", "model.layers.{i}.feed_forward.w1.weight"),
    ("layers.{i}.mlp.up_proj.weight", "model.layers.{i}.feed_forward.w3.weight"),
    ("layers.{i}.mlp.down_proj.weight", "model.layers.{i}.feed_forward.w2.weight"),
    ("norm.weight", "model.embedding_norm.weight"),
    ("lm_head.weight", "lm_head.weight"),
)


def architecture(cfg: ModelConfig) -> str:
    """The Hugging Face model_type of this config: lfm2, qwen3 or llama (see the docstring; the
    config refuses convolution layers without QK-norm)."""
    if cfg.conv_layers:
        return "lfm2"
    return "qwen3" if cfg.qk_norm else "llama"


def _names(cfg: ModelConfig) -> tuple[tuple[str, str], ...]:
    return _LFM2_NAMES if architecture(cfg) == "lfm2" else _NAMES


def _pattern(template: str) -> str:
    return re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{rest\}", "(?P<rest>.+)")


def _rename(name: str, to_hf: bool, names: tuple[tuple[str, str], ...]) -> str:
    for enlace, hf in names:
        source, target = (enlace, hf) if to_hf else (hf, enlace)
        m = re.fullmatch(_pattern(source), name)
        if m:
            return target.format(**m.groupdict())
    raise CheckpointError(f"tensor {name!r} has no {'Hugging Face' if to_hf else 'Enlace'} name")


def state_dict_to_hf(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    return {_rename(k, True, _names(cfg)): v for k, v in state.items()}


def state_dict_from_hf(state: Mapping[str, Tensor], cfg: ModelConfig) -> dict[str, Tensor]:
    """Enlace names for a Hugging Face Qwen3/Llama/LFM2 state dict. For a tied model, a redundant
    lm_head.weight (some tools save it) is dropped."""
    out = {_rename(k, False, _names(cfg)): v for k, v in state.items()}
    if cfg.tie_embeddings:
        out.pop("lm_head.weight", None)
    return out


# --- config -------------------------------------------------------------------------------------
def hf_config(
    cfg: ModelConfig, *, bos_token_id: int | None = None, eos_token_id: int | None = None
) -> dict[str, Any]:
    """config.json for a model of this config: Qwen3 with QK-norm, Llama without, LFM2 with
    short convolutions."""
    kind = architecture(cfg)
    arch = {"lfm2": "Lfm2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}
    out: dict[str, Any] = {
        "architectures": [arch[kind]],
        "model_type": kind,
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
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
    }
    if kind == "lfm2":
        out |= {
            "layer_types": [
                "conv" if i in cfg.conv_layers else "full_attention" for i in range(cfg.n_layers)
            ],
            "conv_L_cache": cfg.conv_kernel,
            "conv_bias": False,
            "norm_eps": cfg.norm_eps,
            "block_auto_adjust_ff_dim": False,  # intermediate_size is the MLP's width as it is
        }
    elif cfg.qk_norm:
        out |= {"use_sliding_window": False, "sliding_window": None}
        out["max_window_layers"] = cfg.n_layers
    else:
        out |= {"mlp_bias": False, "pretraining_tp": 1}
    return out


def config_from_hf(path: PathLike) -> ModelConfig:
    """The ModelConfig of an exported folder's config.json (Qwen3, Llama or LFM2, as written
    here)."""
    f = Path(path)
    try:
        c = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{f}: cannot read the Hugging Face config ({e})") from e
    kind = c.get("model_type")
    if kind not in ("qwen3", "llama", "lfm2"):
        raise CheckpointError(
            f"{f}: model_type {kind!r}; Enlace reads qwen3, llama and lfm2 folders"
        )
    problems = []
    if kind == "lfm2" and (c.get("block_auto_adjust_ff_dim", True) or c.get("conv_bias")):
        problems.append("an adjusted MLP width or convolution biases (Enlace has neither)")
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
            norm_eps=c.get("norm_eps" if kind == "lfm2" else "rms_norm_eps", 1e-6),
            qk_norm=kind != "llama",
            conv_layers=[i for i, t in enumerate(c.get("layer_types") or []) if t == "conv"],
            conv_kernel=c.get("conv_L_cache", 3),
            tie_embeddings=c.get("tie_word_embeddings", False),
            init_std=c.get("initializer_range", 0.02),
        )
    except (KeyError, ValidationError) as e:
        raise CheckpointError(f"{f}: incomplete or invalid config ({e})") from e
