"""The tokenizer files (enlace_data.tokenizer.files): the Hugging Face tokenizer.json gives Enlace's ids
(checked with the `tokenizers` library, what AutoTokenizer runs), and load_tokenizer resolves run
directories, checkpoints, exported folders and files by one rule."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from enlace_data import ByteTokenizer, DataError, Tokenizer, load_tokenizer
from enlace_data.tokenizer import train_tokenizer

tokenizers = pytest.importorskip("tokenizers")

TEXTS = [
    "¡Hola, señora Núñez! ¿Cómo está usted?",
    "En un lugar de la Mancha, de cuyo nombre no quiero acordarme,\nno ha mucho tiempo.",
    "El año 1605 costó 3.250 maravedís.  Dos espacios, y\ttabulador.",
    "Emoji y escrituras raras: 😀 ☃ 漢字 ε",
    "  espacios al principio y al final  ",
    "\n\nlíneas\n\n\nvacías\n",
    "El texto literal <|endoftext|> no es un token especial.",
    "",
]


def _lines() -> list[str]:
    lines = (Path(__file__).parent / "sample_es.txt").read_text(encoding="utf-8").split("\n")
    root = os.environ.get("ENLACE_SHARED_DATA")
    books = sorted(Path(root, "es-pd").glob("*.txt")) if root else []
    if books:
        text = books[0].read_text(encoding="utf-8", errors="replace")[20000:50000]
        lines += [line for line in text.splitlines() if line.strip()]
    return lines


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(_lines(), vocab_size=600)


def test_sentencepiece_tokenizer_json_gives_enlace_ids(tok: Tokenizer, tmp_path: Path) -> None:
    tok.save(tmp_path)
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    hf.encode_special_tokens = True  # what split_special_tokens in tokenizer_config.json asks for
    assert hf.get_vocab_size() == tok.vocab_size
    lines = _lines()
    for text in TEXTS + lines[:200] + ["".join(lines[:3]), "\n".join(lines[3:6])]:
        ids = tok.encode(text)
        assert hf.encode(text, add_special_tokens=True).ids == ids, text
        assert hf.decode(ids) == tok.decode(ids)
    assert [hf.id_to_token(i) for i in (0, 1, 5)] == ["<unk>", "<|endoftext|>", "</tool_call>"]
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["eos_token"] == "<|endoftext|>" and config["unk_token"] == "<unk>"
    description = json.loads((tmp_path / "enlace_tokenizer.json").read_text())
    assert description["kind"] == "sentencepiece" and description["eot_id"] == 1
    assert description["tokenizer_id"] == tok.tokenizer_id


def test_byte_tokenizer_json_ids_are_the_byte_values(tmp_path: Path) -> None:
    ByteTokenizer().save(tmp_path)
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    specials = ByteTokenizer.special_ids
    for text in TEXTS:
        ids = list(text.encode("utf-8"))
        if any(name in text for name in specials):
            # The chat template needs the `tokenizers` side to read special-token text as the
            # special id (Enlace's own encode never does): the one documented difference.
            assert set(hf.encode(text).ids) & set(specials.values()), text
            continue
        assert hf.encode(text).ids == ids, text
        assert hf.decode(ids) == text
    assert [hf.token_to_id(hf.id_to_token(i)) for i in range(256)] == list(range(256))
    assert [hf.token_to_id(name) for name in specials] == list(specials.values())
    assert isinstance(load_tokenizer(tmp_path), ByteTokenizer)


def _checkpoint(run: Path, step: int, save: Callable[[Path], None]) -> Path:
    """A checkpoint directory as enlace_model.atomic_checkpoint lays it out (COMPLETE last)."""
    d = run / "checkpoints" / f"step_{step}"
    save(d)
    (d / "model.json").write_text(json.dumps({"config": {"vocab_size": 600}}))
    files = {
        p.name: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "bytes": p.stat().st_size}
        for p in d.iterdir()
    }
    (d / "COMPLETE").write_text(json.dumps({"step": step, "files": files}))
    return d


def test_one_rule_for_run_dirs_checkpoints_exports_and_files(
    tok: Tokenizer, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    _checkpoint(run, 5, tok.save)
    newest = _checkpoint(run, 10, tok.save)
    (run / "checkpoints" / "step_20").mkdir()  # a save that never finished: no COMPLETE
    # a run directory, a checkpoint, a file inside it
    for path in (run, newest, newest / "model.json", newest / "tokenizer.model"):
        got = load_tokenizer(path)
        assert isinstance(got, Tokenizer) and got.tokenizer_id == tok.tokenizer_id, path
    # an exported folder: config.json + the same tokenizer files, without tokenizer.model
    export = tmp_path / "hf"
    ByteTokenizer().save(export)
    (export / "config.json").write_text(json.dumps({"vocab_size": 256}))
    assert isinstance(load_tokenizer(export), ByteTokenizer)
    # an export made before the description existed: its model's vocabulary decides
    (export / "enlace_tokenizer.json").unlink()
    assert isinstance(load_tokenizer(export), ByteTokenizer)
    # the newest checkpoint's tokenizer damaged: the previous intact one is used
    (newest / "tokenizer.model").write_bytes(b"damaged")
    assert load_tokenizer(run).tokenizer_id == tok.tokenizer_id
    with pytest.raises(DataError, match="neither a run directory"):
        load_tokenizer(tmp_path)


def test_a_description_without_its_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "enlace_tokenizer.json").write_text(json.dumps({"kind": "sentencepiece"}))
    with pytest.raises(DataError, match=r"says 'sentencepiece' but tokenizer\.model is missing"):
        load_tokenizer(tmp_path)


def test_cli_saves_the_files_of_an_older_checkpoint(tok: Tokenizer, tmp_path: Path) -> None:
    """A checkpoint from before these files (tokenizer.model + the old description as
    tokenizer.json): `enlace-data tokenizer CKPT --save DIR` writes the current files."""
    from enlace_data.cli import main

    old = tmp_path / "step_1"
    old.mkdir()
    (old / "tokenizer.model").write_bytes(tok._proto)
    (old / "tokenizer.json").write_text(json.dumps(tok.info()))
    assert main(["tokenizer", str(old), "--save", str(tmp_path / "new")]) == 0
    names = {p.name for p in (tmp_path / "new").iterdir()}
    assert names == {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "tokenizer.model",
        "enlace_tokenizer.json",
    }
    assert load_tokenizer(tmp_path / "new").tokenizer_id == tok.tokenizer_id
    assert main(["tokenizer", str(tmp_path / "missing"), "--save", str(tmp_path / "x")]) == 2
