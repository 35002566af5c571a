"""Export to a Hugging Face folder (Qwen3 or Llama architecture; the mapping is in hf.py).

The folder gets config.json, model.safetensors, generation_config.json, a model card README.md
(model_card.py) and the checkpoint's tokenizer files as enlace-data wrote them at training time
(checkpoint.TOKENIZER_FILES), with the model's context added to tokenizer_config.json as
`model_max_length`. `AutoTokenizer.from_pretrained(folder)` then gives Enlace's ids, and
`load_model` / `load_tokenizer` read the folder back. enlace-model knows nothing of tokenizers
but the special tokens' ids (`special_token_ids`, shared with the GGUF export so both name the
same ones) and the chat template.

generation_config.json bounds prompt and continuation together by the context (`max_length`):
transformers, unlike Enlace's own generation, does not slide the window past the positions the
model was trained on.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from enlace_model.checkpoint import (
    HF_CONFIG_FILE,
    HF_TOKENIZER_CONFIG_FILE,
    HF_TOKENIZER_FILE,
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

__all__ = [
    "chat_template",
    "export_hf",
    "read_json",
    "special_token_ids",
    "token_roles",
    "tokenizer_description",
]

CHAT_TEMPLATE_FILE = "chat_template.jinja"  # transformers' own file for a saved chat template
ROLES = ("bos", "eos", "pad", "unk")  # tokenizer_config.json's <role>_token


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


def token_roles(config: Mapping[str, Any]) -> dict[str, str]:
    """role (ROLES) → the token tokenizer_config.json names for it. bos, where the files name none
    (the byte tokenizer's), is the eos: the corpus puts <|endoftext|> before every document, so it
    also starts one, as config.json has always said. (llama.cpp gives a gpt2 vocabulary without a
    bos id its default, 11: a 0x0B byte here.)"""
    roles = {}
    for role in ROLES:
        piece = config.get(f"{role}_token")
        if isinstance(piece, dict):  # transformers may save an AddedToken as a dict
            piece = piece.get("content")
        if isinstance(piece, str):
            roles[role] = piece
    if "bos" not in roles and "eos" in roles:
        roles["bos"] = roles["eos"]
    return roles


def special_token_ids(
    tok: Mapping[str, Any] | None, config: Mapping[str, Any], *, eot_id: int | None = None
) -> dict[str, int]:
    """role → id of the special tokens, as both exports write them (config.json and
    generation_config.json; the GGUF's tokenizer.ggml.*_token_id): `token_roles(config)` looked up
    in tokenizer.json (`tok`). Without Hugging Face tokenizer files (tok None), the description's
    `eot_id` is bos, eos and pad."""
    if tok is None:
        return dict.fromkeys(("bos", "eos", "pad"), eot_id) if eot_id is not None else {}
    ids = {a["content"]: a["id"] for a in tok.get("added_tokens", [])}
    vocab = tok.get("model", {}).get("vocab", {})
    found = {role: ids.get(piece, vocab.get(piece)) for role, piece in token_roles(config).items()}
    return {role: i for role, i in found.items() if isinstance(i, int)}


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

    hf_files = [tok_dir / HF_TOKENIZER_FILE, tok_dir / HF_TOKENIZER_CONFIG_FILE]
    has_hf_files = description is not None and all(f.is_file() for f in hf_files)
    tok, tok_config = (read_json(f) for f in hf_files) if has_hf_files else (None, {})
    ids = special_token_ids(tok, tok_config, eot_id=(description or {}).get("eot_id"))
    bos, eos, pad = ids.get("bos"), ids.get("eos"), ids.get("pad")
    write_safetensors(out / MODEL_FILE, state_dict_to_hf(state, cfg), {"format": "pt"})
    config = hf_config(cfg, bos_token_id=bos, eos_token_id=eos) | {"pad_token_id": pad}
    _write_json(out / HF_CONFIG_FILE, config)
    # A plain generate() should neither stop after transformers' default of 20 new tokens nor run
    # past the context the model was trained on: prompt and continuation together fill it at most.
    generation: dict[str, Any] = {"do_sample": False, "max_length": cfg.context_length}
    generation |= {f"{role}_token_id": i for role, i in ids.items() if role != "unk"}
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
            tok_config = read_json(out / HF_TOKENIZER_CONFIG_FILE)
            for role, piece in token_roles(tok_config).items():  # the roles config.json names
                tok_config.setdefault(f"{role}_token", piece)
            tok_config["model_max_length"] = cfg.context_length
            _write_json(out / HF_TOKENIZER_CONFIG_FILE, tok_config)
    card = model_card(ckpt, cfg, state, description)
    (out / "README.md").write_text(card, encoding="utf-8")
    return out
