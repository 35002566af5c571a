"""The SentencePiece tokenizer: lossless round trip, fixed special ids, a stable identifier."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
import sentencepiece as spm
from enlace_data import DataError
from enlace_data.tokenizer import (
    SPECIAL_TOKENS,
    ByteTokenizer,
    Tokenizer,
    load_tokenizer,
    train_tokenizer,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# Original Spanish text written for Enlace (40 KB): small enough for fast tests.
SAMPLE = (Path(__file__).parent / "sample_es.txt").read_bytes()

VOCAB = 600


def _lines() -> list[str]:
    text = SAMPLE.decode("utf-8")
    # A little code and digits so the sample is not only prose.
    extra = [
        "def f(x):",
        "    return x * 2  # doble",
        "for i in range(10):",
        "año 1984, 3,14 y 2.500",
    ]
    return text.split("\n") + extra * 5


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return train_tokenizer(_lines(), vocab_size=VOCAB, model_type="bpe")


@pytest.fixture(scope="module")
def unigram() -> Tokenizer:
    return train_tokenizer(_lines(), vocab_size=VOCAB, model_type="unigram")


SPANISH = "aáeéiíoóuúüñÑÁÉÍÓÚ¿¡?!.,;:«»—-()\"' "
TRICKY = " \n\t\r▁▁ 😀👍🏽🇪🇸€ñ{}[]<>=+*/\\|_#@$%&^~`0123456789\u00a0\u200b\u2028"
alphabet = st.one_of(
    st.sampled_from(SPANISH + TRICKY + "abcdefghijklmnopqrstuvwxyz"),
    st.characters(exclude_categories=("Cs",)),
)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=alphabet, max_size=80))
def test_round_trip_is_lossless_for_any_nfc_text(tok: Tokenizer, text: str) -> None:
    text = unicodedata.normalize("NFC", text)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert 0 not in ids  # byte fallback: never <unk>
    assert all(0 <= i < tok.vocab_size for i in ids)


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(" \n\t\r▁añ¿¡😀1"), max_size=60))
def test_round_trip_of_runs_of_spaces_newlines_and_u2581(tok: Tokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode_batch([text, text + "x"])[1]) == text + "x"


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=alphabet, max_size=60))
def test_unigram_round_trip(unigram: Tokenizer, text: str) -> None:
    text = unicodedata.normalize("NFC", text)
    assert unigram.decode(unigram.encode(text)) == text


@pytest.mark.parametrize(
    "text",
    [
        "¿Qué tal, señor Núñez? ¡Muy bien!",
        "  dos espacios al principio y al final  ",
        "línea\n\n\n\ntras líneas vacías\n",
        "▁",
        "a▁b ▁▁ c ▁",
        "emoji 😀 y bandera 🇪🇸",
        "def f(x):\n\treturn {'a': [1, 2]}\r\n",
        "<|endoftext|> es texto, no un token especial",
    ],
)
def test_round_trip_examples(tok: Tokenizer, text: str) -> None:
    assert tok.decode(tok.encode(text)) == text


def test_u2581_is_encoded_as_its_bytes(tok: Tokenizer) -> None:
    ids = tok.encode("▁")
    assert [tok.id_to_piece(i) for i in ids] == ["<0xE2>", "<0x96>", "<0x81>"]
    assert tok.decode(tok.encode("x y")) == "x y"


def test_special_tokens_have_fixed_ids_and_are_never_made_from_text(tok: Tokenizer) -> None:
    for i, name in enumerate(SPECIAL_TOKENS):
        assert tok.id_to_piece(i) == name
        assert tok.special_ids[name] == i
    assert tok.eot_id == tok.bos_id == tok.eos_id == 1
    ids = tok.encode("<|endoftext|><|im_start|>user\n<tool_call>")
    assert not set(ids) & set(range(len(SPECIAL_TOKENS)))
    assert tok.decode([tok.eot_id, *tok.encode("hola"), tok.special_ids["<|im_end|>"]]) == "hola"
    assert len(SPECIAL_TOKENS) == 16  # ids of ordinary pieces never move


def test_digits_are_split(tok: Tokenizer) -> None:
    pieces = [tok.id_to_piece(i) for i in tok.encode("1984")]
    assert pieces == ["1", "9", "8", "4"]


def test_spanish_words_are_few_tokens(tok: Tokenizer) -> None:
    text = "La casa de los Herrera está al final de una calle corta"
    assert len(tok.encode(text)) < len(text.encode()) / 2


def test_training_is_deterministic_and_the_id_follows_the_pieces(tok: Tokenizer) -> None:
    again = train_tokenizer(_lines(), vocab_size=VOCAB, model_type="bpe")
    assert again.tokenizer_id == tok.tokenizer_id
    other = train_tokenizer(_lines(), vocab_size=VOCAB + 10, model_type="bpe")
    assert other.tokenizer_id != tok.tokenizer_id
    shuffled = train_tokenizer(_lines()[::-1], vocab_size=VOCAB, model_type="unigram")
    assert shuffled.tokenizer_id != tok.tokenizer_id


def test_id_does_not_depend_on_the_file(tok: Tokenizer, tmp_path: Path) -> None:
    tok.save(tmp_path / "a")
    tok.save(tmp_path / "b" / "c")
    a = Tokenizer.from_file(tmp_path / "a" / "tokenizer.model")
    b = load_tokenizer(tmp_path / "b" / "c")
    assert isinstance(b, Tokenizer)
    assert a.tokenizer_id == b.tokenizer_id == tok.tokenizer_id
    info = json.loads((tmp_path / "a" / "enlace_tokenizer.json").read_text())
    assert info["tokenizer_id"] == tok.tokenizer_id
    assert info["special_ids"]["<|endoftext|>"] == 1


def test_load_tokenizer_picks_bytes_for_a_byte_level_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_text(json.dumps({"config": {"vocab_size": 256}}))
    bt = load_tokenizer(tmp_path)
    assert isinstance(bt, ByteTokenizer)
    assert bt.decode(bt.encode("añ")) == "añ"
    (tmp_path / "model.json").write_text(json.dumps({"config": {"vocab_size": 8000}}))
    with pytest.raises(DataError, match=r"tokenizer\.model"):
        load_tokenizer(tmp_path)
    with pytest.raises(DataError, match="no such file or directory"):
        load_tokenizer(tmp_path / "nothing")


def test_a_model_that_would_change_text_is_refused(tmp_path: Path) -> None:
    import io

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(_lines()), model_writer=buf, vocab_size=VOCAB, minloglevel=2
    )
    path = tmp_path / "plain.model"
    path.write_bytes(buf.getvalue())
    with pytest.raises(DataError, match="not an Enlace tokenizer") as e:
        Tokenizer.from_file(path)
    assert "add_dummy_prefix" in str(e.value) and str(path) in str(e.value)
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match=r"junk\.model"):
        Tokenizer.from_file(tmp_path / "junk.model")


def test_long_lines_are_not_lost_to_training() -> None:
    # One 40 KB line (a jsonl document without newlines): SentencePiece would skip it whole.
    words = " ".join(_lines()).split()
    line = " ".join(words)[:40000]
    small = train_tokenizer([line], vocab_size=VOCAB, max_sentence_length=4096)
    assert len(small.encode(line)) < len(line.encode()) / 2


def test_bad_vocab_sizes() -> None:
    with pytest.raises(ValueError, match="65536"):
        train_tokenizer(["hola"], vocab_size=70000)
    with pytest.raises(ValueError, match="fixed tokens"):
        train_tokenizer(["hola"], vocab_size=100)
    with pytest.raises(DataError, match="empty"):
        train_tokenizer(["", "  "], vocab_size=VOCAB)
