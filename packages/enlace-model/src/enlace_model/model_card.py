"""The model card (README.md) of an exported Hugging Face folder, written from the run: what the
checkpoint is (a base model or a chat model, from the run's data.kind: every tokenizer carries the
chat template, so it cannot tell), language, license of the weights, training data, tokenizer,
size, and how to run it with transformers and llama.cpp. In Spanish, like everything the family
reads; the YAML header is the Hub's metadata."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enlace_config.schema.model import ModelConfig
from torch import Tensor

from enlace_model.checkpoint import CHECKPOINTS_DIR, CONFIG_FILE, checkpoint_step

__all__ = ["WEIGHTS_LICENSE", "model_card"]

# The license the exported weights are published under: the project's own.
WEIGHTS_LICENSE = "mit"

RUN_CONFIG_FILE = "config.yaml"  # written by the trainer into the run directory


def _run_config(ckpt: Path) -> dict[str, Any]:
    """The run's resolved config (RUN_DIR/config.yaml beside checkpoints/), or {} when the
    checkpoint is not inside a run directory."""
    import yaml

    f = ckpt.parent.parent / RUN_CONFIG_FILE
    if ckpt.parent.name != CHECKPOINTS_DIR or not f.is_file():
        return {}
    try:
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _section(run: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = run.get(name)
    return value if isinstance(value, dict) else {}


def _kind_line(run: Mapping[str, Any]) -> str:
    """What the checkpoint is: data.kind chat is a fine-tune on conversations; bytes and shards
    train on text."""
    kind = _section(run, "data").get("kind")
    origin = _section(run, "train").get("init_from")
    if kind == "chat":
        since = f", partiendo de `{origin}`" if origin else ""
        return (
            f"**Modelo de conversación**: ajustado con conversaciones{since}. Responde por turnos "
            f"con la plantilla de chat incluida (`apply_chat_template`, `llama-server --jinja`)."
        )
    if kind in ("bytes", "shards"):
        return (
            "**Modelo base** (preentrenado con texto): continúa el texto que recibe; no se ajustó "
            "con conversaciones. El tokenizador trae la plantilla de chat de Enlace, pero este "
            "modelo no la aprendió."
        )
    return (
        "No consta si es un modelo base o de conversación: se exportó sin el `config.yaml` de su "
        "ejecución."
    )


def _data_line(run: Mapping[str, Any]) -> str:
    data = _section(run, "data")
    if not data:
        return "no consta en el punto de control (no se exportó desde un directorio de ejecución)"
    kind = {
        "bytes": "texto en bytes UTF-8",
        "shards": "corpus tokenizado en fragmentos",
        "chat": "conversaciones",
    }.get(str(data.get("kind")), str(data.get("kind")))
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
) -> str:
    """README.md for the folder exported from checkpoint `ckpt`. description: its
    enlace_tokenizer.json (None without tokenizer files)."""

    run = _run_config(ckpt)
    name = _section(run, "run").get("name") or ckpt.name
    chat = _section(run, "data").get("kind") == "chat"
    step = checkpoint_step(ckpt)
    n_params = sum(t.numel() for t in state.values())
    arch = "Qwen3" if cfg.qk_norm else "Llama"
    tags = "\n".join(
        f"- {t}" for t in ["enlace", arch.lower()] + (["conversational"] if chat else [])
    )
    return f"""---
language:
- es
license: {WEIGHTS_LICENSE}
library_name: transformers
pipeline_tag: text-generation
tags:
{tags}
---

# {name}

Modelo de lenguaje en español entrenado desde cero con Enlace{f" (paso {step})" if step is not None else ""}.
{_kind_line(run)}

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
print(tok.decode(model.generate(ids)[0]))  # prompt y continuación: {cfg.context_length} tokens como mucho
```

`generation_config.json` fija `max_length = {cfg.context_length}`: el prompt y la continuación juntos
no pasan del contexto con que se entrenó el modelo (transformers no desliza la ventana como Enlace,
y más allá de esa posición el modelo no sabe seguir). Para menos texto, un `max_length` menor;
`max_new_tokens` lo reemplaza y no mira el contexto.

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
