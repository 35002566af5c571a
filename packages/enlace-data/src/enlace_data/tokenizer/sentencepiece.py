"""Enlace's SentencePiece tokenizer: training, a small encode/decode API, and a stable identifier.

The choices serve "decode(encode(text)) == text for any NFC text": identity normalisation (cleaning
did NFC), no dummy prefix, whitespace kept; byte fallback, so no unknown token; digits split; "\\n"
a piece (training sees one paragraph per line). U+2581, SentencePiece's space marker, would decode
as a space: it is encoded as its three byte tokens and kept out of the training sample. Special
tokens are control symbols at fixed ids (`SPECIAL_TOKENS`): never produced from text, decoded to
nothing; <|endoftext|> separates documents and serves as beginning and end.

`tokenizer_id` hashes what decides the ids (pieces, scores, types, normaliser, algorithm, byte
fallback, `ENCODING_RULES`), not the model file, whose trainer section embeds paths and threads.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import sentencepiece as spm

from enlace_data.errors import DataError
from enlace_data.tokenizer.byte_level import ByteTokenizer
from enlace_data.tokenizer.chat_template import CHAT_TEMPLATE
from enlace_data.tokenizer.files import (
    DESCRIPTION_FILE,
    MODEL_FILE,
    TOKENIZER_FILES,
    read_description,
    sentencepiece_tokenizer_json,
    write_tokenizer_files,
)
from enlace_data.tokenizer.special_tokens import EOT, NAMED_SPECIALS

# Fixed ids: position in this tuple. The chat tokens (special_tokens.py) follow <|endoftext|>;
# reserved slots keep later features from moving ids.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<unk>",
    *NAMED_SPECIALS,
    *(f"<|reserved_{i}|>" for i in range(16 - 1 - len(NAMED_SPECIALS))),
)
NEWLINE_PIECE = "\n"
META = "\u2581"
# Bumped when encode() changes how text maps to ids for the same model (part of tokenizer_id).
ENCODING_RULES = "enlace-sp-1: U+2581 as bytes"


class Tokenizer:
    """A trained SentencePiece model with Enlace's encoding rules. Build with `from_file`/`train`."""

    def __init__(self, model_proto: bytes, *, origin: str = "<memory>") -> None:
        self.origin = origin
        self._proto = model_proto
        self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
        spec = _read_specs(model_proto)
        problems = []
        if spec["normalizer_name"] != "identity":
            problems.append(f"normalisation '{spec['normalizer_name']}' (need identity)")
        if spec["add_dummy_prefix"]:
            problems.append("add_dummy_prefix is on")
        if spec["remove_extra_whitespaces"]:
            problems.append("remove_extra_whitespaces is on")
        if not spec["byte_fallback"]:
            problems.append("byte_fallback is off")
        for i, name in enumerate(SPECIAL_TOKENS):
            if i >= self._sp.get_piece_size() or self._sp.id_to_piece(i) != name:
                problems.append(f"id {i} is not {name}")
                break
        if problems:
            raise DataError(
                f"{origin}: not an Enlace tokenizer (it would not keep text intact or special ids "
                f"differ): {'; '.join(problems)}. Train one with `enlace-data corpus CONFIG`."
            )
        self._spec = spec
        self._meta_ids = [self._sp.piece_to_id(f"<0x{b:02X}>") for b in META.encode("utf-8")]
        self.special_ids: dict[str, int] = {name: i for i, name in enumerate(SPECIAL_TOKENS)}
        self.eot_id = self.bos_id = self.eos_id = self.special_ids[EOT]
        self.vocab_size: int = self._sp.get_piece_size()
        self.tokenizer_id: str = self._compute_id()

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Tokenizer:
        p = Path(path)
        if p.is_dir():
            p = p / MODEL_FILE
        try:
            proto = p.read_bytes()
        except OSError as e:
            raise DataError(f"{p}: cannot read the tokenizer model ({e.strerror})") from e
        try:
            return cls(proto, origin=str(p))
        except DataError:
            raise
        except (RuntimeError, ValueError) as e:
            raise DataError(f"{p}: not a SentencePiece model ({e})") from e

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the tokenizer files (tokenizer.model, the Hugging Face files, Enlace's
        description; see files.py) into `directory`, each atomically."""
        roles = {
            "bos_token": EOT,
            "eos_token": EOT,
            "pad_token": EOT,
            "unk_token": SPECIAL_TOKENS[0],
        }
        bpe = self._spec["model_type"] == "bpe"  # unigram has no exact Hugging Face conversion
        write_tokenizer_files(
            directory,
            description=self.info(),
            tokenizer_json=sentencepiece_tokenizer_json(self._spec, self.origin) if bpe else None,
            special_tokens=roles,
            model_proto=self._proto,
        )

    def info(self) -> dict[str, Any]:
        return {
            "kind": "sentencepiece",
            "tokenizer_id": self.tokenizer_id,
            "vocab_size": self.vocab_size,
            "model_type": self._spec["model_type"],
            "special_ids": self.special_ids,
            "eot_id": self.eot_id,
            "encoding_rules": ENCODING_RULES,
            "chat_template": CHAT_TEMPLATE,
        }

    # --- the API ------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens added)."""
        if META not in text:
            return self._sp.encode(text)
        out: list[int] = []
        for i, part in enumerate(text.split(META)):
            if i:
                out.extend(self._meta_ids)
            if part:
                out.extend(self._sp.encode(part))
        return out

    def encode_batch(self, texts: Sequence[str], *, num_threads: int = 1) -> list[list[int]]:
        """`encode` of each text. One thread by default (SentencePiece's own default is every
        core): parallelism belongs to the caller (the corpus encoder's worker processes)."""
        if not any(META in t for t in texts):
            return self._sp.encode(list(texts), num_threads=num_threads)
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; special tokens decode to nothing."""
        return self._sp.decode([int(i) for i in ids])

    def id_to_piece(self, i: int) -> str:
        return self._sp.id_to_piece(i)

    def _compute_id(self) -> str:
        sp = self._sp
        h = hashlib.sha256()
        header = {
            "rules": ENCODING_RULES,
            "model_type": self._spec["model_type"],
            "byte_fallback": self._spec["byte_fallback"],
            "normalizer": self._spec["normalizer_raw"].hex(),
            "denormalizer": self._spec["denormalizer_raw"].hex(),
        }
        h.update(json.dumps(header, sort_keys=True).encode())
        kinds = ((sp.is_control, "c"), (sp.is_unknown, "u"), (sp.is_byte, "b"))
        for i in range(sp.get_piece_size()):
            kind = next((k for test, k in kinds if test(i)), "n")
            h.update(sp.id_to_piece(i).encode("utf-8", "surrogatepass") + b"\x00")
            h.update(struct.pack("<f", sp.get_score(i)) + kind.encode())
        return "sp-" + h.hexdigest()[:32]

    def __repr__(self) -> str:
        return f"Tokenizer({self.tokenizer_id}, vocab_size={self.vocab_size}, from {self.origin})"


def train_tokenizer(
    lines: Iterable[str],
    *,
    vocab_size: int,
    model_type: str = "bpe",
    num_threads: int = 1,
    character_coverage: float = 0.9995,
    max_sentence_length: int = 16384,
) -> Tokenizer:
    """Train on `lines` (paragraphs without newlines; one SentencePiece 'sentence' each).

    Deterministic: the same lines and options give the same pieces (the caller chooses the sample
    with its seed; SentencePiece's own sampling is off).
    """
    if vocab_size > 65536:
        raise ValueError(f"vocab_size {vocab_size} does not fit uint16 shards (max 65536)")
    user_symbols = [NEWLINE_PIECE]
    min_vocab = len(SPECIAL_TOKENS) + len(user_symbols) + 256 + 1
    if vocab_size < min_vocab:
        raise ValueError(f"vocab_size {vocab_size} is below the fixed tokens ({min_vocab})")
    counted = [0]

    # SentencePiece skips (silently) sentences longer than max_sentence_length bytes: cut long
    # lines at a space into pieces that fit even at 4 bytes per character.
    limit = max(16, max_sentence_length // 4)

    def sentences() -> Iterable[str]:
        for line in lines:
            line = line.replace(META, " ").replace("\n", " ")
            while len(line) > limit:
                cut = line.rfind(" ", limit // 2, limit)
                cut = cut if cut > 0 else limit
                head, line = line[:cut], line[cut:]
                if head.strip():
                    counted[0] += 1
                    yield head
            if line.strip():
                counted[0] += 1
                yield line

    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences()),
            model_writer=buf,
            vocab_size=vocab_size,
            model_type=model_type,
            byte_fallback=True,
            split_digits=True,
            normalization_rule_name="identity",
            add_dummy_prefix=False,
            remove_extra_whitespaces=False,
            allow_whitespace_only_pieces=True,
            unk_id=0,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            control_symbols=list(SPECIAL_TOKENS[1:]),
            user_defined_symbols=user_symbols,
            character_coverage=character_coverage,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            max_sentence_length=max_sentence_length,
            max_sentencepiece_length=16,
            hard_vocab_limit=False,
            num_threads=num_threads,
            minloglevel=2,
        )
    except RuntimeError as e:
        if counted[0] == 0:
            raise DataError("cannot train a tokenizer on an empty sample (no text)") from e
        raise DataError(f"SentencePiece training failed: {e}") from e
    return Tokenizer(buf.getvalue(), origin="<trained>")


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer | ByteTokenizer:
    """The tokenizer of a run directory (its newest complete checkpoint), a checkpoint, an exported
    Hugging Face folder, a corpus directory, or a file inside one (tokenizer.model included): the
    paths `enlace_model.load_model` accepts, resolved the same way.

    tokenizer.model present: the SentencePiece tokenizer. Otherwise a description of kind "bytes",
    or a model of vocab_size 256 (model.json or config.json): the ByteTokenizer."""
    d = tokenizer_dir(Path(path))
    if (d / MODEL_FILE).is_file():
        return Tokenizer.from_file(d / MODEL_FILE)
    description = read_description(d)
    kind = None if description is None else description.get("kind")
    if kind == "bytes":
        return ByteTokenizer()
    if kind is not None:
        raise DataError(f"{d}: the tokenizer description says {kind!r} but {MODEL_FILE} is missing")
    vocab = _model_vocab_size(d)
    if vocab == 256:
        return ByteTokenizer()
    raise DataError(
        f"{d}: no {MODEL_FILE} beside a model with vocab_size {vocab}; copy the corpus's tokenizer "
        f"files (`enlace-data tokenizer CORPUS_DIR --save {d}`) into it"
    )


def tokenizer_dir(p: Path) -> Path:
    """The directory holding the tokenizer files for `p` (see load_tokenizer). A run directory
    gives its newest checkpoint whose COMPLETE marker is present and vouches for its tokenizer
    files (the newest intact checkpoint, as enlace_model.resolve_checkpoint chooses; every
    checkpoint of a run carries the same tokenizer)."""
    if not p.exists():
        raise DataError(f"{p}: no such file or directory")
    if p.is_file():
        return p.parent
    markers = (MODEL_FILE, DESCRIPTION_FILE, "tokenizer.json", "model.json", "config.json")
    if any((p / name).is_file() for name in markers):
        return p
    steps = sorted(
        (int(c.name.removeprefix("step_")), c)
        for c in (p / "checkpoints").glob("step_*")
        if c.name.removeprefix("step_").isdigit() and c.is_dir()
    )
    if intact := next((c for _, c in reversed(steps) if _tokenizer_files_intact(c)), None):
        return intact
    raise DataError(
        f"{p}: neither a run directory with a complete checkpoint, a checkpoint, an exported "
        f"folder nor a corpus directory (no {MODEL_FILE}, {DESCRIPTION_FILE} or model.json)"
    )


def _tokenizer_files_intact(step_dir: Path) -> bool:
    """Whether step_dir's COMPLETE marker exists and its tokenizer files match their sha256."""
    try:
        listed = json.loads((step_dir / "COMPLETE").read_text())["files"]
        return all(
            hashlib.sha256((step_dir / name).read_bytes()).hexdigest() == entry["sha256"]
            for name, entry in listed.items()
            if name in TOKENIZER_FILES
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _model_vocab_size(d: Path) -> object:
    """vocab_size of the model beside the tokenizer: model.json (Enlace) or config.json (HF)."""
    for name in ("model.json", "config.json"):
        f = d / name
        if f.is_file():
            try:
                meta = json.loads(f.read_text())
            except (OSError, ValueError) as e:
                raise DataError(f"{f}: unreadable ({e})") from e
            cfg = meta.get("config", meta) if isinstance(meta, dict) else {}
            return cfg.get("vocab_size") if isinstance(cfg, dict) else None
    return None


# --- helpers ----------------------------------------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterable[tuple[int, int | bytes]]:
    """Top-level (field number, value) pairs of a protobuf message (wire format, no schema)."""
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


def _read_specs(proto: bytes) -> dict[str, Any]:
    """The pieces and the options that decide encoding, read from sentencepiece_model.proto's
    field numbers: ModelProto{1: pieces, 2: trainer_spec, 3: normalizer_spec, 5: denormalizer_spec};
    SentencePiece{1: piece, 3: type (1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte)};
    TrainerSpec{3: model_type (1 unigram, 2 bpe, 3 word, 4 char), 35: byte_fallback};
    NormalizerSpec{1: name, 3: add_dummy_prefix, 4: remove_extra_whitespaces,
    5: escape_whitespaces}."""
    try:
        top = list(_fields(proto))
    except (IndexError, ValueError) as e:
        raise ValueError(f"not a SentencePiece model ({e})") from e
    trainer = b"".join(v for n, v in top if n == 2 and isinstance(v, bytes))
    normalizer = b"".join(v for n, v in top if n == 3 and isinstance(v, bytes))
    denormalizer = b"".join(v for n, v in top if n == 5 and isinstance(v, bytes))
    pieces: list[tuple[str, int]] = []
    for n, v in top:
        if n == 1 and isinstance(v, bytes):
            f = dict(_fields(v))
            piece, kind = f.get(1, b""), f.get(3, 1)
            if not isinstance(piece, bytes) or not isinstance(kind, int):
                raise ValueError("not a SentencePiece model (a piece of the wrong wire type)")
            pieces.append((piece.decode("utf-8"), kind))
    t = dict(_fields(trainer))
    nz = dict(_fields(normalizer))
    name = nz.get(1, b"")
    model_types = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
    return {
        "model_type": model_types.get(int(t.get(3, 1)), "unknown"),  # type: ignore[arg-type]
        "byte_fallback": bool(t.get(35, 0)),
        "normalizer_name": name.decode() if isinstance(name, bytes) else "",
        "add_dummy_prefix": bool(nz.get(3, 1)),  # proto default: true
        "remove_extra_whitespaces": bool(nz.get(4, 1)),  # proto default: true
        "escape_whitespaces": bool(nz.get(5, 1)),  # proto default: true
        "pieces": pieces,
        "normalizer_raw": normalizer,
        "denormalizer_raw": denormalizer,
    }
