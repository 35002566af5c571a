"""The model card (README.md) of an exported Hugging Face folder, written from the run: language,
license of the weights, training data, tokenizer, size, and how to run it with transformers and
llama.cpp. In Spanish, like everything the family reads; the YAML header is the Hub's metadata."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enlace_config.schema.model import ModelConfig
from torch import Tensor

from enlace_model.checkpoint import CONFIG_FILE, checkpoint_step

__all__ = ["WEIGHTS_LICENSE", "model_card"]

# The license the exported weights are published under: the project's own.
WEIGHTS_LICENSE = "mit"

RUN_CONFIG_FILE = "config.yaml"  # written by the trainer into the run directory


def _run_config(ckpt: Path) -> dict[str, Any]:
    """The run's resolved config (RUN_DIR/config.yaml beside checkpoints/), or {} when the
    checkpoint is not inside a run directory."""
    import yaml

    f = ckpt.parent.parent / RUN_CONFIG_FILE
    if checkpoint_step(ckpt) is None or not f.is_file():
        return {}
    try:
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _data_line(run: Mapping[str, Any]) -> str:
    data = run.get("data") if isinstance(run.get("data"), dict) else None
    if not data:
        return "no consta en el punto de control (no se exportó desde un directorio de ejecución)"
    kind = {"bytes": "texto en bytes UTF-8", "shards": "corpus tokenizado en fragmentos"}.get(
        str(data.get("kind")), str(data.get("kind"))
    )
    return f"{kind}, de `{data.get('path')}`"


def _tokenizer_line(description: Mapping[str, Any] | None, cfg: ModelConfig) -> str:
    kind = description.get("kind") if description else None
    if kind == "sentencepiece":
        return (
            f"SentencePiece BPE de {cfg.vocab_size} piezas, con respaldo de bytes (ningún texto "
            f"queda sin representar); `tokenizer.model` y su conversión `tokenizer.json`"
        )
    if kind == "bytes":
        return "bytes UTF-8: el identificador de cada token es el valor del byte (0-255)"
    return "no incluido en esta exportación"


def model_card(
    ckpt: Path,
    cfg: ModelConfig,
    state: Mapping[str, Tensor],
    description: Mapping[str, Any] | None,
    *,
    chat: bool,
) -> str:
    """README.md for the folder exported from checkpoint `ckpt`. description: its
    enlace_tokenizer.json (None without tokenizer files); chat: whether it has a chat template."""

    run = _run_config(ckpt)
    name = (run.get("run") or {}).get("name") if isinstance(run.get("run"), dict) else None
    name = name or ckpt.name
    step = checkpoint_step(ckpt)
    n_params = sum(t.numel() for t in state.values())
    arch = "Qwen3" if cfg.qk_norm else "Llama"
    return f"""---
language:
- es
license: {WEIGHTS_LICENSE}
library_name: transformers
pipeline_tag: text-generation
tags:
- enlace
- {arch.lower()}
---

# {name}

Modelo de lenguaje en español entrenado desde cero con Enlace{f" (paso {step})" if step is not None else ""}.
{"Modelo de conversación: incluye plantilla de chat." if chat else "Modelo base: continúa texto, no conversa (no tiene plantilla de chat)."}

- **Tamaño:** {n_params / 1e6:.1f} M de parámetros; {cfg.n_layers} capas, ancho {cfg.d_model}, \
{cfg.n_heads} cabezas de atención ({cfg.n_kv_heads} de clave/valor), contexto de {cfg.context_length} tokens.
- **Arquitectura:** `{arch}ForCausalLM` de transformers (la misma red que Enlace, sin conversión de pesos).
- **Tokenizador:** {_tokenizer_line(description, cfg)}.
- **Datos de entrenamiento:** {_data_line(run)}.
- **Licencia de los pesos:** {WEIGHTS_LICENSE.upper()}.
- **Origen:** `{ckpt.name}/{CONFIG_FILE}` de Enlace.

## Uso con transformers

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained("ESTA_CARPETA")
model = AutoModelForCausalLM.from_pretrained("ESTA_CARPETA")
ids = tok("En un lugar de la Mancha", return_tensors="pt").input_ids
print(tok.decode(model.generate(ids, max_new_tokens=50)[0]))
```

## Uso con llama.cpp

Convierte el punto de control a GGUF con Enlace (no hace falta el conversor de llama.cpp) y
sírvelo con el servidor compatible con la API de OpenAI:

```bash
uv run enlace-model export RUN_DIR modelo.gguf --format gguf --type q8_0
llama-server -m modelo.gguf --jinja --host 127.0.0.1 --port 8080
```

## Diferencias conocidas

- Enlace codifica un carácter U+2581 (`▁`) literal como sus tres bytes; `tokenizers` y llama.cpp lo
  leen como un espacio.
- Aquí el texto que contiene una marca especial escrita (por ejemplo `<|endoftext|>`) produce el
  token especial, como necesita la plantilla de chat; Enlace nunca crea tokens especiales desde el
  texto del usuario.
"""
