"""What the model reads: raw UTF-8 bytes (smoke runs), uint16 token shards (the real corpus), or
conversations (chat fine-tuning)."""

from collections.abc import Iterator
from typing import Literal

from pydantic import Field, PositiveInt

from enlace_config.schema.base import FieldProblem, StrictModel


class DataConfig(StrictModel):
    kind: Literal["bytes", "shards", "chat"]
    """bytes: UTF-8 text, vocab 256. shards: uint16 tokens. chat: conversations (JSONL with
    OpenAI-style messages), rendered in Enlace's chat format."""
    path: str = Field(..., min_length=1)
    """bytes: a directory holding train.txt and val.txt. shards: a directory of shards with their
    manifest. chat: a directory holding train.jsonl and val.jsonl. Relative paths are read from
    the working directory."""
    fallback: Literal["none", "builtin"] = "none"
    """bytes and chat: when `path` does not exist, train on the public-domain books (bytes) or
    the conversation set (chat) built into enlace-data; the log says which."""
    context_length: PositiveInt
    """Tokens per training sequence."""
    eval_batches: PositiveInt = Field(20, le=100_000)
    """Validation micro-batches per evaluation."""
    tokenizer: str = Field("bytes", min_length=1)
    """chat only: 'bytes' (the byte tokenizer with its special tokens) or a directory holding the
    run's tokenizer.model."""
    overflow: Literal["truncate", "drop"] = "drop"
    """chat only: a conversation longer than context_length + 1 tokens is cut to fit (truncate)
    or left out (drop); either way it is counted in the log."""
    builtin_conversations: PositiveInt = 4000
    """chat with the built-in set: conversations generated for train (val gets a tenth as many,
    from held-out slot values)."""
    chat_eval_conversations: PositiveInt = 64
    """chat only: held-out conversations replayed at each evaluation (greedy replies to their
    first user turn and to their first tool result) for the chat measures of
    enlace_train/chat_eval.py: turn endings, tool calls, argument fidelity, grounded answers,
    invention, spurious calls."""
    chat_eval_max_tokens: PositiveInt = 200
    """chat only: most tokens generated per evaluated reply."""
    copied_weight: float = Field(1.0, ge=1, le=100)
    """chat only: the training loss's weight on the assistant's tokens that copy the
    conversation's words (those in a run of at least copied_min_tokens tokens that stands in a
    user message or tool result before them): the town of a search, the temperature of an answer,
    the name in a memory. 1: every trained token weighs the same. The loss is still divided by
    the count of trained tokens, so a weight above 1 is a larger step on the copies alone; the
    validation loss is never weighted."""
    copied_min_tokens: int = Field(4, ge=2, le=64)
    """chat only: the shortest run of tokens that counts as a copy for copied_weight (shorter
    ones, a «de la», stand everywhere)."""
    eval_text_files: list[str] = Field(default_factory=list)
    """UTF-8 text files held out from training, scored at every evaluation in bits per byte
    (sliding window, as `enlace-train eval`) and logged as val_text_bpb: a figure that compares
    across tokenizers. Relative paths are read from the working directory."""
    eval_text_stride: PositiveInt | None = None
    """Tokens between the sliding windows of eval_text_files (None: half the context; smaller
    gives every token more context and costs more)."""

    def _problems(self) -> Iterator[FieldProblem]:
        if self.kind == "shards" and self.fallback != "none":
            yield FieldProblem(
                "fallback",
                "the built-in books are UTF-8 bytes; a shards run has no fallback (set fallback: "
                "none, or kind: bytes)",
                ("kind",),
            )
        if self.kind != "chat" and self.copied_weight != 1:
            yield FieldProblem(
                "copied_weight",
                f"{self.copied_weight} weighs the copies of a conversation's words, and kind "
                f"{self.kind} has no conversations (set it to 1, or kind: chat)",
                ("kind",),
            )
        stride = self.eval_text_stride
        if stride is not None and stride > self.context_length:
            yield FieldProblem(
                "eval_text_stride",
                f"{stride} is longer than the scoring window (context_length "
                f"{self.context_length}): bytes between windows would never be scored",
                ("context_length",),
            )
