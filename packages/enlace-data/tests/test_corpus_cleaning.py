"""Cleaning, filters, source reading (txt documents, Gutenberg boilerplate, jsonl) and dedup units."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from enlace_config.schema.corpus import CleaningConfig, CorpusSource, DedupConfig
from enlace_data import DataError
from enlace_data.corpus.cleaning import clean_text, filter_reason, stopword_ratio
from enlace_data.corpus.dedup import DedupIndex, MinHasher, optimal_bands
from enlace_data.corpus.sources import SourceReader

# Original Spanish text written for Enlace (40 KB): small enough for fast tests.
SAMPLE = (Path(__file__).parent / "sample_es.txt").read_bytes()

SPANISH = SAMPLE.decode("utf-8").split("\n\n")[1]
ENGLISH = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope."
)


def test_clean_text_normalises_without_losing_text() -> None:
    raw = "Cafe\u0301 \x00con\x07 leche\ufeff  \r\nsegunda\rtercera\n\n\n\n\ncuarta\t \n"
    out = clean_text(raw)
    assert out == "Café con leche\nsegunda\ntercera\n\ncuarta"
    assert clean_text(out) == out
    assert clean_text("\tcódigo:\n\tsangría") == "código:\n\tsangría"


def test_filters() -> None:
    cfg = CleaningConfig(min_chars=50)
    assert filter_reason("corto", cfg) == "too_short"
    assert filter_reason(SPANISH, cfg) is None
    assert filter_reason(ENGLISH, cfg) == "not_spanish"
    menu = "\n".join(["Inicio", "Contacto", "Inicio", "Contacto", "Inicio", "Contacto"] * 3)
    assert filter_reason(menu + "\n" + SPANISH, cfg) == "repeated_lines"
    ratio_es, _ = stopword_ratio(SPANISH)
    ratio_en, _ = stopword_ratio(ENGLISH)
    assert ratio_es > 0.3 > 0.1 > ratio_en
    off = CleaningConfig(min_chars=50, min_spanish_stopword_ratio=0)
    assert filter_reason(ENGLISH, off) is None


def _read(path: Path, **cleaning: object) -> tuple[list[str], SourceReader]:
    reader = SourceReader(
        CorpusSource(name="s", path=str(path)),
        0,
        CleaningConfig(**cleaning),
        "test.yaml",  # type: ignore[arg-type]
    )
    return [d.text for d in reader], reader


PROSE = (
    "En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho\n"
    "tiempo que vivía un hidalgo de los de lanza en astillero, adarga antigua,\n"
    "rocín flaco y galgo corredor."
)
VERSE = "Volverán las oscuras golondrinas\nen tu balcón sus nidos a colgar,\ny otra vez con el ala"


def test_txt_documents_unwrap_prose_keep_verse_and_drop_gutenberg(tmp_path: Path) -> None:
    body = "\n\n".join([PROSE, VERSE] * 20)
    text = (
        "The Project Gutenberg EBook of Algo, by Alguien\n\nLicense blah\n\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK ALGO ***\n\n\n"
        "Produced by Someone and the Online Distributed\nProofreading Team at http://www.pgdp.net\n\n"
        f"{body}\n\nEnd of the Project Gutenberg EBook of Algo\n\n*** END OF THIS PROJECT ***\nlicense text\n"
    )
    f = tmp_path / "libro.txt"
    f.write_text(text, encoding="utf-8")
    docs, reader = _read(f, doc_chars=1000)
    joined = "\n\n".join(docs)
    assert "Gutenberg" not in joined and "Produced" not in joined and "license" not in joined
    assert "no ha mucho tiempo que vivía" in joined  # wrapped prose joined with a space
    assert "golondrinas\nen tu balcón" in joined  # verse keeps its lines
    assert len(docs) > 3 and all(len(d) >= 1000 for d in docs[:-1])
    assert joined.count("En un lugar de la Mancha") == 20
    assert reader.stats.gutenberg_files == 1


def test_txt_without_gutenberg_markers_is_kept_whole(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_text("\ufeffPrimera línea.\n\nSegunda.\n", encoding="utf-8")
    docs, reader = _read(f)
    assert docs == ["Primera línea.\n\nSegunda."]
    assert reader.stats.bytes == f.stat().st_size
    f.write_bytes(b"Uno.\r\n\r\nDos\r\ntres")  # CRLF, no final newline
    docs, _ = _read(f)
    assert docs == ["Uno.\n\nDos\ntres"]


def test_jsonl_and_gzip(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with open(tmp_path / "d" / "a.jsonl", "w") as f:
        f.write(json.dumps({"contenido": "uno"}) + "\n\n" + json.dumps({"contenido": "dos"}) + "\n")
    with gzip.open(tmp_path / "d" / "b.jsonl.gz", "wt") as g:
        g.write(json.dumps({"contenido": "tres"}) + "\n")
    (tmp_path / "d" / "ignored.md").write_text("no")
    reader = SourceReader(
        CorpusSource(name="s", path=str(tmp_path / "d"), text_field="contenido"),
        0,
        CleaningConfig(),
    )
    assert [d.text for d in reader] == ["uno", "dos", "tres"]
    assert reader.stats.files == 2 and reader.stats.docs == 3


def test_bad_utf8_policies(tmp_path: Path) -> None:
    f = tmp_path / "latin1.txt"
    f.write_bytes(
        "Línea buena.\n\nCanción mala\n".encode() + "y más: año".encode("latin-1") + b"\n"
    )
    with pytest.raises(DataError, match=r"latin1.txt:4: not valid UTF-8.*bad_utf8"):
        _read(f)
    docs, reader = _read(f, bad_utf8="replace")
    assert "m\ufffds: a\ufffdo" in docs[0] and reader.stats.bad_utf8_bytes == 2
    docs, reader = _read(f, bad_utf8="drop")
    assert "año" not in docs[0] and "Canción mala" in docs[0]
    assert reader.stats.bad_utf8_dropped == 1


def test_missing_source_path_names_key_and_file(tmp_path: Path) -> None:
    os.environ["ENLACE_TEST_NOWHERE"] = str(tmp_path / "nowhere")
    reader = SourceReader(
        CorpusSource(name="libros", path="$ENLACE_TEST_NOWHERE/x"), 3, CleaningConfig(), "c.yaml"
    )
    with pytest.raises(
        DataError, match=r"sources\[3\]\.path \('libros'\) in c.yaml.*does not exist"
    ):
        list(reader)


def _shuffled(text: str, seed: int) -> str:
    import random

    words = text.split()
    random.Random(seed).shuffle(words)
    return " ".join(words)


def test_near_duplicates_found_and_distinct_documents_kept() -> None:
    paragraphs = [p for p in SAMPLE.decode("utf-8").split("\n\n") if len(p) > 400]
    cfg = DedupConfig(threshold=0.8)
    index, hasher = DedupIndex(cfg), MinHasher(cfg)

    def seen_similar(text: str) -> bool:
        return index.seen_similar_signature(hasher.signature(text))

    for p in paragraphs:
        assert not seen_similar(p)
    for k in range(5):  # word-shuffled versions share words but almost no 5-word shingles
        assert not seen_similar(_shuffled(paragraphs[0], k))
    words = paragraphs[1].split()
    words[10] = "cambiado"
    words[-3] = "distinto"
    assert seen_similar(" ".join(words))  # two words changed: a near duplicate
    assert seen_similar(paragraphs[2].upper())  # case-folded shingles
    assert len(index) == len(paragraphs) + 5


def test_band_choice_brackets_the_threshold() -> None:
    b, r = optimal_bands(0.8, 128)
    assert b * r <= 128
    p = lambda s: 1 - (1 - s**r) ** b  # noqa: E731
    assert p(0.9) > 0.99 and p(0.5) < 0.05


# ---------------------------------------------------------------------------- web filters
PORTUGUESE = (
    "Era uma vez uma menina que morava numa pequena aldeia perto da floresta. Todos os dias ela "
    "levava pão e leite para a avó, que estava doente e não podia sair de casa. A mãe dizia que "
    "não devia falar com estranhos no caminho, mas a menina gostava de parar para colher flores."
)


def test_symbol_and_repetition_filters_catch_web_junk_and_keep_prose() -> None:
    from enlace_data.corpus.cleaning import duplicate_ngram_fraction, symbol_ratio

    cfg = CleaningConfig(min_chars=50, max_symbol_ratio=0.1, max_duplicate_ngram_fraction=0.2)
    markup = SPANISH + "\n" + "{{<>}} |~| ^^ <<>> ☆☆☆☆ ▓▓▓▓ ♥♥♥ " * 12
    spam = " ".join(["compra zapatos baratos online envío gratis hoy"] * 12) + " " + SPANISH
    assert symbol_ratio(SPANISH) < 0.02 and symbol_ratio(markup) > 0.1
    assert duplicate_ngram_fraction(SPANISH) < 0.05 and duplicate_ngram_fraction(spam) > 0.5
    assert filter_reason(SPANISH, cfg) is None
    assert filter_reason(markup, cfg) == "symbols"
    assert filter_reason(spam, cfg) == "repetition"
    assert filter_reason(markup, CleaningConfig(min_chars=50)) is None  # off by default


def test_boilerplate_lines_are_removed_and_counted() -> None:
    from enlace_data.corpus.cleaning import remove_boilerplate_lines

    page = f"Aceptar COOKIES y continuar\n{SPANISH}\n© 2024 Todos los derechos reservados."
    text, removed = remove_boilerplate_lines(page, ["cookies", "todos los derechos reservados"])
    assert (text, removed) == (SPANISH, 2)
    assert remove_boilerplate_lines(page, []) == (page, 0)


def test_language_id_with_lingua_drops_what_stopwords_let_through() -> None:
    from enlace_config.schema.corpus import LanguageIdConfig
    from enlace_data.corpus.cleaning import LanguageId

    # Portuguese shares enough function words with Spanish to pass the stop-word test.
    plain = CleaningConfig(min_chars=50, min_spanish_stopword_ratio=0.1)
    assert filter_reason(PORTUGUESE, plain) is None
    lid_cfg = LanguageIdConfig(languages=["es", "pt", "en"])
    lid = LanguageId(lid_cfg)
    cfg = plain.model_copy(update={"language_id": lid_cfg})
    assert filter_reason(PORTUGUESE, cfg, lid) == "language_id"
    assert filter_reason(SPANISH, cfg, lid) is None
    assert lid.confidence(SPANISH) > 0.9
    with pytest.raises(DataError, match="'xx'"):
        LanguageId(LanguageIdConfig(languages=["es", "xx"]))


# ---------------------------------------------------------------------------- parquet
def _write_parquet(path: Path, texts: list[str | None], column: str = "text") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": list(range(len(texts))), column: texts})
    pq.write_table(table, path, row_group_size=7)


def _read_source(source: CorpusSource) -> tuple[list[str], SourceReader]:
    reader = SourceReader(source, 0, CleaningConfig())
    return [d.text for d in reader], reader


def test_parquet_rows_are_documents_streamed_with_limits(tmp_path: Path) -> None:
    docs: list[str | None] = [f"documento {i} " + SPANISH for i in range(40)]
    docs[3] = None
    _write_parquet(tmp_path / "a.parquet", docs[:25], column="content")
    _write_parquet(tmp_path / "b.parquet", docs[25:], column="content")
    src = CorpusSource(name="web", path=str(tmp_path), text_field="content")
    texts, reader = _read_source(src)
    assert texts == [d for d in docs if d is not None]
    assert reader.stats.files == 2 and reader.stats.null_docs == 1
    assert reader.stats.bytes == sum(len(t.encode()) for t in texts)
    assert not reader.stats.stopped_at_limit
    texts, reader = _read_source(src.model_copy(update={"max_docs": 30}))
    assert len(texts) == 30 and reader.stats.stopped_at_limit and reader.stats.files == 2
    one = len(texts[0].encode())
    texts, reader = _read_source(src.model_copy(update={"max_bytes": 5 * one - 1}))
    assert len(texts) == 5 and reader.stats.files == 1  # the crossing document is the last
    with pytest.raises(DataError, match=r"no column 'text' \(columns: id, content\)"):
        _read_source(CorpusSource(name="web", path=str(tmp_path)))
    with pytest.raises(DataError, match="holds int values"):
        _read_source(CorpusSource(name="web", path=str(tmp_path), text_field="id"))
    (tmp_path / "c.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"c\.parquet: cannot read as parquet"):
        _read_source(src)


def test_dedup_state_lives_in_a_file_and_is_removed_after(tmp_path: Path) -> None:
    cfg = DedupConfig()
    path = tmp_path / "dedup.sqlite"
    index, hasher = DedupIndex(cfg, path), MinHasher(cfg)
    paragraphs = [p for p in SAMPLE.decode("utf-8").split("\n\n") if len(p) > 400]
    for k, p in enumerate(paragraphs):
        assert index.check(k.to_bytes(16, "little"), hasher.signature(p)) is None
    assert (
        index.check((0).to_bytes(16, "little"), hasher.signature("otra cosa")) == "exact_duplicate"
    )
    assert index.check(b"x" * 16, hasher.signature(paragraphs[0])) == "near_duplicate"
    index.db.commit()
    assert path.stat().st_size > len(paragraphs) * 512  # the signatures are on disk
    index.close()
    assert not path.exists()


def test_corpus_limit_flag_sets_every_source_limit() -> None:
    from enlace_config.schema.corpus import CorpusConfig
    from enlace_data.corpus.cli import with_limit

    cfg = CorpusConfig(
        name="x",
        out_dir="o",
        sources=[CorpusSource(name="a", path="a"), CorpusSource(name="b", path="b", max_bytes=10)],
    )
    limited = with_limit(cfg, "5GB")
    assert [s.max_bytes for s in limited.sources] == [5 * 10**9, 10]
    assert [s.max_docs for s in with_limit(cfg, "1000docs").sources] == [1000, 1000]
    assert with_limit(cfg, "1.5MB").sources[0].max_bytes == 1_500_000
    with pytest.raises(DataError, match="--limit '5 parsecs'"):
        with_limit(cfg, "5 parsecs")
