"""The stream both loaders walk (loader.Loader over tokens, chat.loader.ChatLoader over
conversations): their keyword arguments, the global stream of samples split between ranks, and
its resumable state. Below both, so that loader.py can dispatch to chat/loader.py at the top."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, NotRequired, Self, TypedDict, Unpack

import numpy as np

from enlace_data.errors import DataError

Split = Literal["train", "val"]
STATE_FORMAT = 1
IntArray = np.ndarray[Any, np.dtype[np.int64]]
FloatArray = np.ndarray[Any, np.dtype[np.float32]]
# (inputs, targets) from Loader, (inputs, targets, segments[, loss weights]) from chat
Batch = tuple[IntArray | FloatArray, ...]


class StreamArgs(TypedDict):
    """The keyword arguments of every loader: which split, the shapes, the seed of the order, and
    this process's rank among world_size (default 0 of 1)."""

    split: Split
    context_length: int
    micro_batch_size: int
    seed: int
    rank: NotRequired[int]
    world_size: NotRequired[int]


def check_rank(rank: int, world_size: int) -> None:
    if world_size <= 0 or not 0 <= rank < world_size:
        raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")


class StreamLoader:
    """What both loaders share (`loader.Loader`, `chat.loader.ChatLoader`): the global stream of
    samples split between ranks, and its state `samples_consumed` with what it is valid for
    (dataset fingerprint, seed, context length), checked on resume. Each loader sets what it reads
    (`description`, `bytes_per_token`, `vocab_size`, `tokenizer_id`) and says `_dataset()`."""

    _what = "data loader"  # in messages
    _location: Path | str | None = None  # the data's path, for messages
    description: str
    bytes_per_token: float
    vocab_size: int
    tokenizer_id: str

    def __init__(self, **stream: Unpack[StreamArgs]) -> None:
        self.micro_batch_size = stream["micro_batch_size"]
        self.rank, self.world_size = stream.get("rank", 0), stream.get("world_size", 1)
        if self.micro_batch_size <= 0:
            raise ValueError(f"micro_batch_size must be positive, got {self.micro_batch_size}")
        check_rank(self.rank, self.world_size)
        self.split: Split = stream["split"]
        self.context_length = stream["context_length"]
        self.seed = stream["seed"]
        self.samples_consumed = 0  # global samples (chat: conversations), all ranks together

    def _dataset(self) -> tuple[str, str, str]:
        """(data.kind, fingerprint, summary) of what this loader reads."""
        raise NotImplementedError

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Batch:
        """The next micro-batch of this rank (each loader says its arrays)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release open files (each loader says which)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable state; the position counts global samples, not batches."""
        kind, fingerprint, summary = self._dataset()
        return {
            "format": STATE_FORMAT,
            "kind": kind,
            "split": self.split,
            "dataset": fingerprint,
            "dataset_summary": summary,
            "seed": self.seed,
            "context_length": self.context_length,
            "samples_consumed": self.samples_consumed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where the saved loader stopped; refuse a state from other data."""
        mine = self.state_dict()
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise DataError(
                f"unknown {self._what} state (format {state.get('format') if isinstance(state, dict) else state!r}, "
                f"expected {STATE_FORMAT}); it was written by another enlace-data version",
                path=self._location,
            )
        problems: list[str] = []
        for key, what in (
            ("kind", "data.kind"),
            ("split", "split"),
            ("dataset", None),
            ("seed", "the seed (train.seed)"),
            ("context_length", "data.context_length"),
        ):
            if state.get(key) == mine[key]:
                continue
            problems.append(
                f"{what} was {state.get(key)!r}, now {mine[key]!r}"
                if what
                else f"the state was saved on other data ({state.get('dataset_summary')!r}); "
                f"this loader reads {mine['dataset_summary']!r}"
            )
        consumed = state.get("samples_consumed")
        if not isinstance(consumed, int) or isinstance(consumed, bool) or consumed < 0:
            problems.append(f"samples_consumed must be a non-negative integer, got {consumed!r}")
        if problems:
            raise DataError(
                f"refusing to resume the {self._what} from a state that does not match it: "
                + "; ".join(problems)
                + ". Resume with the same data and settings, or start a new run.",
                path=self._location,
            )
        assert isinstance(consumed, int)
        self.samples_consumed = consumed

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.description!r}, split={self.split}, "
            f"B={self.micro_batch_size}, T={self.context_length}, rank={self.rank}/"
            f"{self.world_size}, samples_consumed={self.samples_consumed})"
        )
