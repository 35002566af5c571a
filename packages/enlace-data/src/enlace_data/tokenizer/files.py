"""The tokenizer files: what a corpus, a checkpoint and an export carry so that no other package
needs the tokenizer's internals. Written by `Tokenizer.save` / `ByteTokenizer.save`, read by
`load_tokenizer`, copied into checkpoints and Hugging Face exports.

    tokenizer.json           the Hugging Face `tokenizers` file: same ids as Enlace's `encode`
    tokenizer_config.json    Hugging Face's settings: class, special tokens, chat template
    special_tokens_map.json  the same special tokens, for older tools
    tokenizer.model          the SentencePiece model (SentencePiece tokenizers only)
    enlace_tokenizer.json    Enlace's description: kind, tokenizer_id, vocab_size, special_ids...

The JSON is written directly (no `tokenizers` dependency). SentencePiece BPE converts to BPE with
byte fallback, merges derived as transformers' SentencePieceExtractor derives them. One known
difference: Enlace encodes a literal U+2581 as its three byte tokens; `tokenizers` reads a space.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from enlace_data._fs import json_bytes, write_atomic
from enlace_data.errors import DataError

MODEL_FILE = "tokenizer.model"
HF_TOKENIZER_FILE = "tokenizer.json"
HF_CONFIG_FILE = "tokenizer_config.json"
HF_SPECIAL_FILE = "special_tokens_map.json"
DESCRIPTION_FILE = "enlace_tokenizer.json"
TOKENIZER_FILES = (HF_TOKENIZER_FILE, HF_CONFIG_FILE, HF_SPECIAL_FILE, MODEL_FILE, DESCRIPTION_FILE)

# SentencePiece piece types (sentencepiece_model.proto).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"
_NOT_SPLIT = dict.fromkeys(("single_word", "lstrip", "rstrip", "normalized"), False)


def write_tokenizer_files(
    directory: str | os.PathLike[str],
    *,
    description: dict[str, Any],
    tokenizer_json: dict[str, Any] | None,
    special_tokens: dict[str, str],
    model_proto: bytes | None = None,
) -> None:
    """Write the tokenizer files into `directory`, all renamed in together. special_tokens: Hugging Face's
    roles (bos_token, eos_token, pad_token, unk_token) → piece. tokenizer_json None (a tokenizer
    without an exact Hugging Face form): Enlace's files only."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
        # Enlace never makes a special token from text: "<|endoftext|>" typed by a user is
        # ordinary text (SentencePiece control symbols are not matched in the input).
        "split_special_tokens": True,
        **special_tokens,
    }
    if description.get("chat_template"):
        # apply_chat_template renders text and tokenizes it: the special tokens' text must then
        # read as their ids (as in every Hugging Face chat model), so they are not split here.
        config |= {"chat_template": description["chat_template"], "split_special_tokens": False}
    files = {d / DESCRIPTION_FILE: json_bytes(description)}
    if model_proto is not None:
        files[d / MODEL_FILE] = model_proto
    if tokenizer_json is not None:
        files[d / HF_TOKENIZER_FILE] = json_bytes(tokenizer_json)
        files[d / HF_CONFIG_FILE] = json_bytes(config)
        files[d / HF_SPECIAL_FILE] = json_bytes(special_tokens)
    write_atomic(files)  # all renamed in together: never one tokenizer's model beside another's ids


# --- byte level ---------------------------------------------------------------------------------
def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (the ByteLevel alphabet)."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    bs += range(ord("®"), ord("ÿ") + 1)
    rest = [b for b in range(256) if b not in bs]  # the others, in order, from 256 on
    return {
        b: chr(c) for b, c in zip(bs + rest, bs + [256 + n for n in range(len(rest))], strict=True)
    }


def byte_tokenizer_json(special_ids: dict[str, int] | None = None) -> dict[str, Any]:
    """A `tokenizers` tokenizer whose ids are the UTF-8 byte values (no merges), the special
    tokens added at their ids."""
    alphabet = _bytes_to_unicode()
    byte_level = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    return _tokenizer(
        vocab={alphabet[b]: b for b in range(256)},
        merges=[],
        added=[(i, name, True) for name, i in (special_ids or {}).items()],
        unk=None,
        byte_fallback=False,
        normalizer=None,
        pre_tokenizer=byte_level,
        decoder=byte_level,
    )


# --- SentencePiece ------------------------------------------------------------------------------
def sentencepiece_tokenizer_json(spec: dict[str, Any], origin: str) -> dict[str, Any]:
    """Convert a SentencePiece BPE model trained the Enlace way (identity normalisation, no dummy
    prefix, byte fallback) into a `tokenizers` tokenizer with the same ids. spec: the pieces
    ((piece, type) in id order) and options read from the model (tokenizer._read_specs)."""
    pieces: list[tuple[str, int]] = spec["pieces"]
    if spec["model_type"] != "bpe":
        raise DataError(
            f"{origin}: a {spec['model_type']} model has no exact Hugging Face conversion here; "
            f"train a bpe tokenizer (tokenizer.model_type: bpe) to export it"
        )
    vocab = {piece: i for i, (piece, _) in enumerate(pieces)}
    unk = next((p for p, kind in pieces if kind == UNKNOWN), None)
    # Every split of a mergeable piece into two vocabulary pieces, ordered by the merged piece's
    # rank (its id: SentencePiece sorts BPE pieces by score), then by the ids of the two halves.
    merges: list[tuple[int, int, int, str, str]] = []
    for piece, kind in pieces:
        if kind != NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in vocab and right in vocab:
                merges.append((vocab[piece], vocab[left], vocab[right], left, right))
    merges.sort()
    added = [
        (i, piece, kind != USER_DEFINED)
        for i, (piece, kind) in enumerate(pieces)
        if kind in (CONTROL, UNKNOWN, USER_DEFINED)
    ]
    escape = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    return _tokenizer(
        vocab=vocab,
        merges=[[left, right] for *_, left, right in merges],
        added=added,
        unk=unk,
        byte_fallback=spec["byte_fallback"],
        normalizer=escape if spec["escape_whitespaces"] else None,
        pre_tokenizer=None,
        decoder={
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
    )


def _tokenizer(
    *,
    vocab: dict[str, int],
    merges: list[list[str]],
    added: list[tuple[int, str, bool]],  # (id, content, special)
    unk: str | None,
    byte_fallback: bool,
    normalizer: dict[str, Any] | None,
    pre_tokenizer: dict[str, Any] | None,
    decoder: dict[str, Any],
) -> dict[str, Any]:
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": content, **_NOT_SPLIT, "special": special}
            for i, content, special in added
        ],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": decoder,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": unk is not None,
            "byte_fallback": byte_fallback,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def read_description(directory: Path) -> dict[str, Any] | None:
    """enlace_tokenizer.json of `directory` (None when absent). Checkpoints written before it
    existed kept the description in tokenizer.json, which is read then."""
    for name in (DESCRIPTION_FILE, HF_TOKENIZER_FILE):
        f = directory / name
        if not f.is_file():
            continue
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise DataError(f"{f}: unreadable tokenizer description ({e})") from e
        if isinstance(data, dict) and "kind" in data:
            return data
    return None
