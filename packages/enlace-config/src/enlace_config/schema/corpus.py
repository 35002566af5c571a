"""A corpus build (`enlace-data corpus CONFIG`): raw text sources in, uint16 token shards out.

Owned by enlace-data's corpus pipeline; it lives here so that `enlace-config check` validates corpus
files without importing numpy or sentencepiece. Every threshold the pipeline applies is a field here,
so a build is described completely by its file (the manifest records the resolved config).
"""

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from enlace_config.schema.base import StrictModel

SOURCE_NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
MAX_UINT16_VOCAB = 65536


class CorpusSource(StrictModel):
    name: str = Field(
        default=...,
        pattern=SOURCE_NAME_PATTERN,
        description="Short name of the source; token counts in the manifest and report are per name.",
    )
    path: str = Field(
        default=...,
        description="A file or a folder (searched recursively, in sorted order) of .txt, .jsonl or "
        ".jsonl.gz files. $VARS are expanded; relative paths are read from the working "
        "directory.",
    )
    text_field: str = Field(
        default="text",
        description="jsonl only: the key of each line's object that holds the document.",
    )
    weight: PositiveFloat = Field(
        default=1.0,
        description="Sampling weight in the train split: each train document is written "
        "floor(weight) times, plus once more for a deterministic (hash-chosen) fraction "
        "weight - floor(weight) of documents. 1.0 writes each once; 0.5 keeps about half.",
    )


class CleaningConfig(StrictModel):
    bad_utf8: Literal["error", "replace", "drop"] = Field(
        default="error",
        description="Bytes that are not valid UTF-8. error: stop with a message naming the file "
        "and line. replace: replace them with U+FFFD. drop: drop the document (txt: the line). "
        "Counted in the report either way.",
    )
    strip_gutenberg: bool = Field(
        default=True,
        description="Remove the Project Gutenberg header (up to the '*** START OF' line), footer "
        "(from 'End of the Project Gutenberg' / '*** END OF') and paragraphs naming Project "
        "Gutenberg or its producers.",
    )
    doc_chars: PositiveInt = Field(
        default=4000,
        description=".txt sources: a document is consecutive paragraphs (split at blank lines) "
        "until it holds at least this many characters.",
    )
    unwrap_min_chars: PositiveInt = Field(
        default=50,
        description=".txt sources: a paragraph in which at least 3/4 of the lines (the last aside) are "
        "this long is hard-wrapped prose and its lines are joined with a space; paragraphs of "
        "shorter lines (verse, lists) keep their line breaks.",
    )
    min_chars: NonNegativeInt = Field(
        default=200, description="Drop documents shorter than this many characters after cleaning."
    )
    max_repeated_line_fraction: float = Field(
        default=0.3,
        ge=0,
        le=1,
        description="Drop documents in which more than this fraction of the non-empty lines are "
        "repeats of an earlier line of the same document (menus, boilerplate, tables).",
    )
    min_spanish_stopword_ratio: float = Field(
        default=0.2,
        ge=0,
        le=1,
        description="Drop documents in which fewer than this fraction of the words are common "
        "Spanish function words (a cheap 'is this Spanish?' test). 0 disables it.",
    )
    language_min_words: NonNegativeInt = Field(
        default=20,
        description="The Spanish test only judges documents with at least this many words.",
    )


class DedupConfig(StrictModel):
    exact: bool = Field(
        default=True,
        description="Drop a document whose normalised text (case-folded, whitespace collapsed) "
        "hashes like an earlier one's.",
    )
    near: bool = Field(
        default=True, description="Drop near-duplicates of earlier documents (MinHash/LSH)."
    )
    threshold: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Near-duplicate when the estimated Jaccard similarity of the documents' word "
        "shingle sets is at least this.",
    )
    num_perm: PositiveInt = Field(
        default=128, description="MinHash permutations (signature length)."
    )
    shingle_words: PositiveInt = Field(default=5, description="Words per shingle.")
    seed: int = Field(default=1, description="Seeds the MinHash permutations.")


class SplitConfig(StrictModel):
    val_fraction: float = Field(
        default=0.02,
        gt=0,
        lt=1,
        description="Fraction of documents in the validation split, chosen by a hash of the "
        "document's normalised text: the same document lands in the same split whatever other "
        "sources are added.",
    )
    salt: str = Field(default="enlace", description="Mixed into the split hash (change to redraw).")


class TokenizerConfig(StrictModel):
    path: str | None = Field(
        default=None,
        description="Use this existing tokenizer.model (its tokenizer.json beside it) instead of "
        "training one. $VARS are expanded; relative paths are read from the working directory.",
    )
    model_type: Literal["bpe", "unigram"] = Field(
        default="bpe", description="SentencePiece algorithm."
    )
    vocab_size: PositiveInt = Field(
        default=32768,
        le=MAX_UINT16_VOCAB,
        description="Number of token ids, special tokens and the 256 byte tokens included.",
    )
    sample_chars: PositiveInt = Field(
        default=20_000_000,
        description="Train on about this many characters of the train split (a hash-chosen sample).",
    )
    seed: int = Field(
        default=0, description="Chooses the training sample. Training is deterministic."
    )
    num_threads: PositiveInt = Field(default=2, description="SentencePiece trainer threads.")
    character_coverage: float = Field(
        default=0.9995,
        gt=0,
        le=1,
        description="Fraction of characters covered by pieces; the rarest rest are byte tokens.",
    )

    @model_validator(mode="after")
    def _vocab_holds_the_fixed_tokens(self) -> "TokenizerConfig":
        if self.path is None and self.vocab_size < 512:
            raise ValueError(
                f"vocab_size {self.vocab_size} is too small: 256 byte tokens and the special "
                "tokens come first (use at least 512)"
            )
        return self


class EncodingConfig(StrictModel):
    shard_tokens: PositiveInt = Field(
        default=50_000_000,
        description="Target tokens per shard; a shard ends at the first document boundary at or "
        "after it.",
    )
    workers: PositiveInt = Field(
        default=2,
        description="Worker processes, for cleaning and MinHash signatures and for encoding (1: "
        "all in the main process). The output does not depend on it.",
    )
    batch_chars: PositiveInt = Field(
        default=1_000_000, description="Characters of text sent to a worker at a time."
    )


class CorpusConfig(StrictModel):
    name: str = Field(..., pattern=SOURCE_NAME_PATTERN, description="Name of the corpus build.")
    out_dir: str = Field(
        default=...,
        description="Where the shards, manifest, tokenizer and report go (e.g. data/es-pd); the "
        "training config's data.path. Relative paths are read from the working directory.",
    )
    sources: list[CorpusSource] = Field(..., min_length=1, description="The raw text inputs.")
    cleaning: CleaningConfig = Field(
        default_factory=lambda: CleaningConfig(), description="Cleaning and filters."
    )
    dedup: DedupConfig = Field(default_factory=lambda: DedupConfig(), description="Deduplication.")
    split: SplitConfig = Field(
        default_factory=lambda: SplitConfig(), description="Train/validation split."
    )
    tokenizer: TokenizerConfig = Field(
        default_factory=lambda: TokenizerConfig(), description="The SentencePiece tokenizer."
    )
    encoding: EncodingConfig = Field(
        default_factory=lambda: EncodingConfig(), description="Encoding into shards."
    )

    @model_validator(mode="after")
    def _source_names_unique(self) -> "CorpusConfig":
        names = [s.name for s in self.sources]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"source names must be unique; repeated: {', '.join(repeated)}")
        return self
