"""Export to a Hugging Face folder (Qwen3 or Llama architecture; the mapping is in hf.py).

The folder gets config.json, model.safetensors, generation_config.json, a model card README.md
(model_card.py) and the checkpoint's tokenizer files as enlace-data wrote them at training time
(checkpoint.TOKENIZER_FILES), with the model's context added to tokenizer_config.json as
`model_max_length`. `AutoTokenizer.from_pretrained(folder)` then gives Enlace's ids, and
`load_model` / `load_tokenizer` read the folder back. enlace-model knows nothing of tokenizers:
the eos id comes from enlace_tokenizer.json's `eot_id`.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

from enlace_model.checkpoint import (
    HF_CONFIG_FILE,
    HF_TOKENIZER_CONFIG_FILE,
    MODEL_FILE,
    TOKENIZER_DESCRIPTION_FILE,
    TOKENIZER_FILES,
    PathLike,
    is_hf_folder,
    load_state_dict,
    read_model_config,
    resolve_checkpoint,
    write_safetensors,
)
from enlace_model.errors import CheckpointError
from enlace_model.hf import hf_config, state_dict_to_hf
from enlace_model.model_card import model_card

__all__ = ["chat_template", "export_hf", "read_json", "tokenizer_description"]

CHAT_TEMPLATE_FILE = "chat_template.jinja"  # transformers' own file for a saved chat template


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from e


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def tokenizer_description(directory: Path, vocab_size: int) -> dict[str, Any] | None:
    """enlace_tokenizer.json of `directory`, checked against the model's vocabulary; None when the
    directory has no tokenizer files. Refuses the files of checkpoints written before it existed."""
    f = directory / TOKENIZER_DESCRIPTION_FILE
    if not f.is_file():
        old = directory / "tokenizer.json"
        if old.is_file() and "kind" in (read_json(old) or {}):
            raise CheckpointError(
                f"{directory}: its tokenizer files predate the Hugging Face ones (tokenizer.json is "
                f"Enlace's old description). Write current ones with `enlace-data tokenizer "
                f"{directory} --save TOKENIZER_DIR` and export with --tokenizer TOKENIZER_DIR."
            )
        return None
    description = read_json(f)
    got = description.get("vocab_size") if isinstance(description, dict) else None
    # A model may have more rows than its tokenizer has ids (the byte chat model: 263 ids padded
    # to 264 rows), never fewer.
    if not isinstance(got, int) or not vocab_size - 8 < got <= vocab_size:
        raise CheckpointError(
            f"{f}: a tokenizer of vocabulary {got} beside a model with vocab_size {vocab_size}"
        )
    return description


def chat_template(directory: Path) -> str | None:
    """The chat template of a checkpoint or export: `chat_template` in its tokenizer_config.json,
    or chat_template.jinja, where transformers' `save_pretrained` moves it; None for a base
    model."""
    jinja = directory / CHAT_TEMPLATE_FILE
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = directory / HF_TOKENIZER_CONFIG_FILE
    value = read_json(config).get("chat_template") if config.is_file() else None
    return value if isinstance(value, str) else None


def export_hf(
    checkpoint: PathLike, out_dir: PathLike, *, tokenizer: PathLike | None = None
) -> Path:
    """Write a Hugging Face folder for a checkpoint (or a run directory's newest). The tokenizer
    files come from the checkpoint, or from `tokenizer` (a directory written by enlace-data's
    `Tokenizer.save`). Returns the folder."""
    ckpt = resolve_checkpoint(checkpoint)
    if is_hf_folder(ckpt):
        raise CheckpointError(f"{ckpt}: already an exported Hugging Face folder")
    cfg = read_model_config(ckpt)
    state = load_state_dict(ckpt)  # refuses tensors that disagree with model.json
    tok_dir = ckpt if tokenizer is None else Path(tokenizer)
    description = tokenizer_description(tok_dir, cfg.vocab_size)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not (out / HF_CONFIG_FILE).is_file():
        raise CheckpointError(
            f"{out}: exists and is not an earlier export; choose an empty or new directory"
        )
    out.mkdir(parents=True, exist_ok=True)

    eos = description.get("eot_id") if description else None
    write_safetensors(out / MODEL_FILE, state_dict_to_hf(state), {"format": "pt"})
    _write_json(out / HF_CONFIG_FILE, hf_config(cfg, eos_token_id=eos) | {"pad_token_id": eos})
    # A plain generate() should not stop after transformers' default of 20 new tokens: allow a
    # whole context's worth, the longest continuation the model was trained to attend over.
    generation: dict[str, Any] = {"do_sample": False, "max_new_tokens": cfg.context_length}
    if eos is not None:
        generation |= {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}
    end_of_turn = (description or {}).get("special_ids", {}).get("<|im_end|>")
    if eos is not None and description and description.get("chat_template") and end_of_turn:
        generation["eos_token_id"] = [end_of_turn, eos]  # a chat model also stops at its turn end
    _write_json(out / "generation_config.json", generation)

    if description is None:
        warnings.warn(
            f"{tok_dir}: no tokenizer files: exported without them. Write them with `enlace-data "
            f"tokenizer CORPUS_DIR --save TOKENIZER_DIR` and export with --tokenizer TOKENIZER_DIR.",
            stacklevel=2,
        )
    else:
        for name in TOKENIZER_FILES:
            if (tok_dir / name).is_file():
                shutil.copyfile(tok_dir / name, out / name)
        if (out / HF_TOKENIZER_CONFIG_FILE).is_file():
            config = read_json(out / HF_TOKENIZER_CONFIG_FILE)
            config["model_max_length"] = cfg.context_length
            _write_json(out / HF_TOKENIZER_CONFIG_FILE, config)
    card = model_card(ckpt, cfg, state, description, chat=chat_template(tok_dir) is not None)
    (out / "README.md").write_text(card, encoding="utf-8")
    return out
