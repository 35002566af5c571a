"""What the model reads: raw UTF-8 bytes (smoke runs) or uint16 token shards (the real corpus)."""

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from enlace_config.schema.base import FieldProblem, StrictModel, raise_problems


class DataConfig(StrictModel):
    kind: Literal["bytes", "shards"] = Field(
        ..., description="bytes: UTF-8 text, vocab 256. shards: uint16 tokens."
    )
    path: str = Field(
        ...,
        min_length=1,
        description="bytes: a directory holding train.txt and val.txt. shards: a directory of "
        "shards with their manifest. Relative paths are read from the working directory.",
    )
    fallback: Literal["none", "builtin"] = Field(
        "none",
        description="bytes only: when `path` does not exist, train on the public-domain books built "
        "into enlace-data (the log says which one a run used).",
    )
    context_length: PositiveInt = Field(..., description="Tokens per training sequence.")
    eval_batches: PositiveInt = Field(
        20, le=100_000, description="Validation micro-batches per evaluation."
    )

    @model_validator(mode="after")
    def _fallback_only_for_bytes(self) -> "DataConfig":
        if self.kind == "shards" and self.fallback != "none":
            raise_problems(
                [
                    FieldProblem(
                        "fallback",
                        "the built-in books are UTF-8 bytes; a shards run has no fallback "
                        "(set fallback: none, or kind: bytes)",
                        ("kind",),
                    )
                ]
            )
        return self
