"""The Hugging Face mapping: Enlace's state-dict keys and config ↔ Qwen3 / Llama.

The model follows Hugging Face's conventions (rotary on halves, per-head QK-norm before the
rotation, no biases, SwiGLU), so the mapping is a renaming of keys (_NAMES), never a permutation.
A model with QK-norm maps to `Qwen3ForCausalLM`; one without to `LlamaForCausalLM`, the same
network minus the q/k norms. Used by the export (writing) and checkpoint.py (reading back).
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

__all__ = ["config_from_hf", "hf_config", "state_dict_from_hf", "state_dict_to_hf"]

PathLike = str | os.PathLike[str]

# (Enlace name, Hugging Face name); {i} is the layer index, {rest} the rest of the name.
_NAMES: tuple[tuple[str, str], ...] = (
    ("embed.weight", "model.embed_tokens.weight"),
    ("layers.{i}.attn_norm.weight", "model.layers.{i}.input_layernorm.weight"),
    ("layers.{i}.attn.{rest}", "model.layers.{i}.self_attn.{rest}"),
    ("layers.{i}.mlp_norm.weight", "model.layers.{i}.post_attention_layernorm.weight"),
    ("layers.{i}.mlp.{rest}", "model.layers.{i}.mlp.{rest}"),
    ("norm.weight", "model.norm.weight"),
    ("lm_head.weight", "lm_head.weight"),
)


def _pattern(template: str) -> str:
    return re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)").replace(r"\{rest\}", "(?P<rest>.+)")


def _rename(name: str, to_hf: bool) -> str:
    for enlace, hf in _NAMES:
        source, target = (enlace, hf) if to_hf else (hf, enlace)
        m = re.fullmatch(_pattern(source), name)
        if m:
            return target.format(**m.groupdict())
    raise CheckpointError(f"tensor {name!r} has no {'Hugging Face' if to_hf else 'Enlace'} name")


def state_dict_to_hf(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {_rename(k, to_hf=True): v for k, v in state.items()}


def state_dict_from_hf(state: Mapping[str, Tensor], tie_embeddings: bool) -> dict[str, Tensor]:
    """Enlace names for a Hugging Face Qwen3/Llama state dict. For a tied model, a redundant
    lm_head.weight (some tools save it) is dropped."""
    out = {_rename(k, to_hf=False): v for k, v in state.items()}
    if tie_embeddings:
        out.pop("lm_head.weight", None)
    return out


# --- config -------------------------------------------------------------------------------------
def hf_config(
    cfg: ModelConfig, *, bos_token_id: int | None = None, eos_token_id: int | None = None
) -> dict[str, Any]:
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
        "bos_token_id": bos_token_id,
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
