"""The root of a run file: one section per component, and the checks that span sections."""

import re
from collections.abc import Iterator, Mapping

from pydantic import Field, field_validator

from enlace_config.errors import ConfigError, Problem
from enlace_config.schema.base import MAX_UINT16_VOCAB, FieldProblem, StrictModel
from enlace_config.schema.data import DataConfig
from enlace_config.schema.hardware import HardwareConfig
from enlace_config.schema.model import ModelConfig
from enlace_config.schema.train import TrainConfig

RUN_NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
BYTE_VOCAB_SIZE = 256
BYTE_CHAT_VOCAB_SIZE = 263  # enlace-data's ByteTokenizer: 256 bytes + 7 special tokens


def batch_split_problems(
    hardware: HardwareConfig, train: TrainConfig, world_size: int = 1
) -> list[FieldProblem]:
    """The global batch must be a whole number of micro-batches on every device."""
    micro, batch = hardware.micro_batch_size, train.global_batch_size
    if batch % (micro * world_size) == 0:
        return []
    devices = f" on each of {world_size} devices" if world_size > 1 else ""
    fits = [n for n in range(1, batch // micro + 1) if batch % (micro * n) == 0][:8]
    message = (
        f"{batch} sequences per step is not a whole number of micro-batches of {micro} "
        f"(hardware.micro_batch_size){devices}; gradient accumulation is derived as global batch "
        f"/ (micro-batch x world size), so use a multiple of it (world sizes that fit: {fits})"
    )
    return [FieldProblem("train.global_batch_size", message, ("hardware.micro_batch_size",))]


class RunSection(StrictModel):
    name: str
    """Names the run's directory and tmux session (default: the run file's stem). Letters,
    digits, '.', '_' and '-' only."""
    out_dir: str = Field(..., min_length=1)
    """Where checkpoints and metrics go (default runs/<name>, relative to the working directory)."""

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, name: str) -> str:
        if not re.fullmatch(RUN_NAME_PATTERN, name) or set(name) == {"."}:
            raise ValueError(
                "a run name may hold only letters, digits, '.', '_' and '-' (it names a directory "
                "and a tmux session), and not only dots"
            )
        return name


class RunConfig(StrictModel):
    run: RunSection
    """The run's name and output directory."""
    hardware: HardwareConfig
    """Board, precision, kernels, micro-batch."""
    model: ModelConfig
    """The transformer's shape."""
    train: TrainConfig
    """Optimizer, schedule, batch, intervals, seed."""
    data: DataConfig
    """What the model reads."""

    def grad_accumulation_steps(self, world_size: int = 1) -> int:
        """Micro-steps per optimizer step: global batch / (micro-batch x world size); ConfigError
        when the global batch does not split evenly at this world size."""
        problems = batch_split_problems(self.hardware, self.train, world_size)
        if problems:
            subject = f"the run at world size {world_size}"
            raise ConfigError([Problem(p.message, key=p.key) for p in problems], subject)
        return self.train.global_batch_size // (self.hardware.micro_batch_size * world_size)

    def _problems(self) -> Iterator[FieldProblem]:
        return self.cross_section_problems(self.__dict__)

    @classmethod
    def cross_section_problems(cls, sections: Mapping[str, object]) -> Iterator[FieldProblem]:
        """The checks across sections, on whichever sections are given: the loader passes those
        that validated when another failed, so a batch mismatch is not hidden by a bad head count."""
        hardware, train = sections.get("hardware"), sections.get("train")
        model, data = sections.get("model"), sections.get("data")
        if isinstance(hardware, HardwareConfig) and isinstance(train, TrainConfig):
            yield from batch_split_problems(hardware, train)
        if isinstance(train, TrainConfig) and isinstance(data, DataConfig):
            byte_rows = data.kind == "bytes" or (data.kind == "chat" and data.tokenizer == "bytes")
            if train.aba_rows_share and data.kind == "chat":
                yield FieldProblem(
                    "train.aba_rows_share",
                    "«A B A» rows are made of a row's own text, and a chat row is conversations "
                    "with their roles and loss weights: use them in pretraining (data.kind bytes "
                    "or shards), or set aba_rows_share 0",
                    ("data.kind",),
                )
            if "recall" in train.copy_records_source and not byte_rows:
                yield FieldProblem(
                    "train.copy_records_source",
                    f"recall records are bytes («ab=qwhf cd=zmu|cd=zmu ab=qwhf»), for rows of "
                    f"bytes or of chat on the byte tokenizer, not data.kind {data.kind} with "
                    f"tokenizer {data.tokenizer}: use letters or text",
                    ("data.kind", "data.tokenizer"),
                )
        if isinstance(model, ModelConfig) and isinstance(data, DataConfig):
            vocab = model.vocab_size
            if data.kind == "bytes" and vocab < BYTE_VOCAB_SIZE:
                yield FieldProblem(
                    "model.vocab_size",
                    f"data.kind bytes feeds byte values 0..255, so the model needs vocab_size "
                    f">= {BYTE_VOCAB_SIZE}, not {vocab} (ids above 255 are the chat tokens)",
                    ("data.kind",),
                )
            if data.kind == "chat" and data.tokenizer == "bytes" and vocab < BYTE_CHAT_VOCAB_SIZE:
                yield FieldProblem(
                    "model.vocab_size",
                    f"chat on the byte tokenizer uses ids up to {BYTE_CHAT_VOCAB_SIZE - 1} "
                    f"(bytes and the chat tokens), so the model needs vocab_size >= "
                    f"{BYTE_CHAT_VOCAB_SIZE}, not {vocab}",
                    ("data.kind", "data.tokenizer"),
                )
            if data.kind == "shards" and vocab > MAX_UINT16_VOCAB:
                yield FieldProblem(
                    "model.vocab_size",
                    f"uint16 shards hold token ids below {MAX_UINT16_VOCAB}; vocab_size {vocab} "
                    "does not fit",
                    ("data.kind",),
                )
            if data.context_length > model.context_length:
                yield FieldProblem(
                    "data.context_length",
                    f"training sequences of {data.context_length} tokens are longer than "
                    f"the model's context_length {model.context_length}",
                    ("model.context_length",),
                )
