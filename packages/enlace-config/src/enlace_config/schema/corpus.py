"""A corpus build (`enlace-data corpus CONFIG`): raw text sources in, uint16 token shards out.

Owned by enlace-data's corpus pipeline; it lives here so that `enlace-config check` validates corpus
files without importing numpy or sentencepiece. Every threshold the pipeline applies is a field here,
so a build is described completely by its file (the manifest records the resolved config).
"""

from collections.abc import Iterator
from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from enlace_config.schema.base import MAX_UINT16_VOCAB, FieldProblem, StrictModel, repeated

SOURCE_NAME_PATTERN = r"^[A-Za-z0-9._-]+$"


class CorpusSource(StrictModel):
    name: str = Field(default=..., pattern=SOURCE_NAME_PATTERN)
    """Short name of the source; token counts in the manifest and report are per name."""
    kind: Literal["files", "hub"] = "files"
    """files: local files under `path`. hub: parquet files of a Hugging Face Hub dataset
    (`dataset`, `subset`, `split`, `files`), downloaded into the Hugging Face cache (HF_HOME; an
    interrupted download resumes) as the build reads them, in name order."""
    path: str | None = None
    """kind files: a file or a folder (searched recursively, in sorted order) of .txt, .jsonl,
    .jsonl.gz or .parquet files. $VARS are expanded; relative paths are read from the working
    directory."""
    text_field: str = "text"
    """jsonl: the key of each line's object that holds the document; parquet (and hub): the
    column that holds it."""
    dataset: str | None = None
    """kind hub: the dataset's id on the Hub, e.g. HuggingFaceFW/fineweb-2."""
    subset: str | None = None
    """kind hub: the dataset's config (subset), e.g. spa_Latn; replaces {subset} in `files`."""
    split: str = "train"
    """kind hub: the split; replaces {split} in `files`."""
    files: str = "{subset}/{split}/*.parquet"
    """kind hub: which files of the dataset repository to read, a glob pattern relative to its
    root (after {subset} and {split} are replaced), e.g. data/{subset}/{split}/*.parquet."""
    revision: str | None = None
    """kind hub: a branch, tag or commit of the dataset (None: the main branch). A commit makes
    the build reproducible."""
    max_bytes: PositiveInt | None = None
    """Read at most about this many bytes of raw text from this source (the document that crosses
    it is the last), in file order: 5_000_000_000 takes the first 5 GB. For kind hub only the
    files needed are downloaded. None: all of it."""
    max_docs: PositiveInt | None = None
    """Read at most this many documents from this source."""
    weight: PositiveFloat = 1.0
    """Sampling weight in the train split: each train document is written floor(weight) times,
    plus once more for a deterministic (hash-chosen) fraction weight - floor(weight) of
    documents. 1.0 writes each once; 0.5 keeps about half."""

    def _problems(self) -> Iterator[FieldProblem]:
        if self.kind == "files" and self.path is None:
            yield FieldProblem("path", "a source of kind files needs a path")
        if self.kind == "hub":
            if self.dataset is None:
                yield FieldProblem("dataset", "a source of kind hub needs a dataset id")
            if self.path is not None:
                yield FieldProblem("path", "kind hub reads `dataset`, not a path", ("kind",))
            if "{subset}" in self.files and self.subset is None:
                yield FieldProblem("subset", "`files` uses {subset}: set subset", ("files",))


class LanguageIdConfig(StrictModel):
    languages: list[str] = Field(
        default_factory=lambda: ["es", "en", "pt", "fr", "it", "ca"], min_length=2
    )
    """ISO 639-1 codes of the languages lingua chooses among (the first is the one kept). Fewer
    languages: faster and less memory."""
    min_confidence: float = Field(default=0.5, ge=0, le=1)
    """Drop documents whose confidence of being in the first language is below this."""
    sample_chars: PositiveInt = 1000
    """Judge the first this many characters of a document (the cost grows with the text's length;
    a web page rarely changes language)."""


class CleaningConfig(StrictModel):
    bad_utf8: Literal["error", "replace", "drop"] = "error"
    """Bytes that are not valid UTF-8. error: stop with a message naming the file and line.
    replace: replace them with U+FFFD. drop: drop the document (txt: the line). Counted in the
    report either way."""
    strip_gutenberg: bool = True
    """Remove the Project Gutenberg header (up to the '*** START OF' line), footer (from 'End of
    the Project Gutenberg' / '*** END OF') and paragraphs naming Project Gutenberg or its
    producers."""
    doc_chars: PositiveInt = 4000
    """.txt sources: a document is consecutive paragraphs (split at blank lines) until it holds
    at least this many characters."""
    unwrap_min_chars: PositiveInt = 50
    """.txt sources: a paragraph in which at least 3/4 of the lines (the last aside) are this
    long is hard-wrapped prose and its lines are joined with a space; paragraphs of shorter lines
    (verse, lists) keep their line breaks."""
    min_chars: NonNegativeInt = 200
    """Drop documents shorter than this many characters after cleaning."""
    max_repeated_line_fraction: float = Field(default=0.3, ge=0, le=1)
    """Drop documents in which more than this fraction of the non-empty lines are repeats of an
    earlier line of the same document (menus, boilerplate, tables)."""
    min_spanish_stopword_ratio: float = Field(default=0.2, ge=0, le=1)
    """Drop documents in which fewer than this fraction of the words are common Spanish function
    words (a cheap 'is this Spanish?' test). 0 disables it."""
    language_min_words: NonNegativeInt = 20
    """The Spanish tests (stop words, language identification) only judge documents with at least
    this many words."""
    language_id: LanguageIdConfig | None = None
    """Language identification with lingua (the `web` extra of enlace-data: `pip install
    enlace-data[web]`), after the stop-word test. None: off."""
    max_symbol_ratio: float = Field(default=1.0, ge=0, le=1)
    """Drop documents in which more than this fraction of the non-space characters are neither
    letters nor digits nor common punctuation (markup, code, emoji runs, mojibake). 1.0 disables
    it; web text: about 0.1."""
    max_duplicate_ngram_fraction: float = Field(default=1.0, ge=0, le=1)
    """Drop documents in which more than this fraction of the characters lie in word 5-grams that
    occur more than once in the document (spam, keyword lists, generated pages; Gopher's
    repetition test). 1.0 disables it; web text: about 0.15."""
    boilerplate_lines: list[str] = Field(default_factory=list)
    """Remove every line that contains one of these phrases (case-insensitive): cookie banners,
    'todos los derechos reservados', share buttons. Counted in the report; a document left too
    short is then dropped as too_short."""


class DedupConfig(StrictModel):
    exact: bool = True
    """Drop a document whose normalised text (case-folded, whitespace collapsed) hashes like an
    earlier one's."""
    near: bool = True
    """Drop near-duplicates of earlier documents (MinHash/LSH)."""
    threshold: float = Field(default=0.8, gt=0, le=1)
    """Near-duplicate when the estimated Jaccard similarity of the documents' word shingle sets
    is at least this."""
    num_perm: PositiveInt = 128
    """MinHash permutations (signature length)."""
    shingle_words: PositiveInt = 5
    """Words per shingle."""
    seed: int = 1
    """Seeds the MinHash permutations."""
    cache_mb: PositiveInt = 64
    """Memory for the deduplication state's page cache (SQLite); the state itself is on disk, so
    memory does not grow with the corpus."""


class SplitConfig(StrictModel):
    val_fraction: float = Field(default=0.02, gt=0, lt=1)
    """Fraction of documents in the validation split, chosen by a hash of the document's
    normalised text: the same document lands in the same split whatever other sources are added."""
    salt: str = "enlace"
    """Mixed into the split hash (change to redraw)."""


class TokenizerConfig(StrictModel):
    path: str | None = None
    """Use this existing tokenizer.model (its tokenizer.json beside it) instead of training one.
    $VARS are expanded; relative paths are read from the working directory."""
    model_type: Literal["bpe", "unigram"] = "bpe"
    """SentencePiece algorithm."""
    vocab_size: PositiveInt = Field(default=32768, le=MAX_UINT16_VOCAB)
    """Number of token ids, special tokens and the 256 byte tokens included."""
    sample_chars: PositiveInt = 20_000_000
    """Train on about this many characters of the train split (a hash-chosen sample)."""
    seed: int = 0
    """Chooses the training sample. Training is deterministic."""
    num_threads: PositiveInt = 2
    """SentencePiece trainer threads."""
    character_coverage: float = Field(default=0.9995, gt=0, le=1)
    """Fraction of characters covered by pieces; the rarest rest are byte tokens."""

    @model_validator(mode="after")
    def _vocab_holds_the_fixed_tokens(self) -> "TokenizerConfig":
        if self.path is None and self.vocab_size < 512:
            raise ValueError(
                f"vocab_size {self.vocab_size} is too small: 256 byte tokens and the special "
                "tokens come first (use at least 512)"
            )
        return self


class EncodingConfig(StrictModel):
    shard_tokens: PositiveInt = 50_000_000
    """Target tokens per shard; a shard ends at the first document boundary at or after it."""
    workers: PositiveInt = 2
    """Worker processes, for cleaning and MinHash signatures and for encoding (1: all in the main
    process). The output does not depend on it."""
    batch_chars: PositiveInt = 1_000_000
    """Characters of text sent to a worker at a time."""


class CorpusConfig(StrictModel):
    name: str = Field(..., pattern=SOURCE_NAME_PATTERN)
    """Name of the corpus build."""
    out_dir: str
    """Where the shards, manifest, tokenizer and report go (e.g. data/es-pd); the training
    config's data.path. Relative paths are read from the working directory."""
    sources: list[CorpusSource] = Field(..., min_length=1)
    """The raw text inputs."""
    cleaning: CleaningConfig = Field(default_factory=CleaningConfig)
    """Cleaning and filters."""
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    """Deduplication."""
    split: SplitConfig = Field(default_factory=SplitConfig)
    """Train/validation split."""
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    """The SentencePiece tokenizer."""
    encoding: EncodingConfig = Field(default_factory=EncodingConfig)
    """Encoding into shards."""

    @model_validator(mode="after")
    def _source_names_unique(self) -> "CorpusConfig":
        if names := repeated([s.name for s in self.sources]):
            raise ValueError(f"source names must be unique; repeated: {', '.join(names)}")
        return self
