"""The root of a run file: one section per component, and the checks that span sections."""

from pydantic import Field, model_validator

from enlace_config.schema.base import StrictModel
from enlace_config.schema.data import DataConfig
from enlace_config.schema.hardware import HardwareConfig
from enlace_config.schema.model import ModelConfig
from enlace_config.schema.train import TrainConfig

RUN_NAME_PATTERN = r"^[A-Za-z0-9._-]+$"


class RunSection(StrictModel):
    name: str = Field(
        ...,
        pattern=RUN_NAME_PATTERN,
        description="Names the run's directory and tmux session (default: the run file's stem).",
    )
    out_dir: str = Field(..., description="Where checkpoints and metrics go (default runs/<name>).")


class RunConfig(StrictModel):
    run: RunSection
    hardware: HardwareConfig
    model: ModelConfig
    train: TrainConfig
    data: DataConfig

    def grad_accumulation_steps(self, world_size: int = 1) -> int:
        per_step = self.hardware.micro_batch_size * world_size
        if self.train.global_batch_size % per_step:
            raise ValueError(
                f"train.global_batch_size ({self.train.global_batch_size}) is not divisible by "
                f"hardware.micro_batch_size ({self.hardware.micro_batch_size}) x world size "
                f"({world_size})"
            )
        return self.train.global_batch_size // per_step

    @model_validator(mode="after")
    def _sections_agree(self) -> "RunConfig":
        problems: list[str] = []
        if self.train.global_batch_size % self.hardware.micro_batch_size:
            problems.append(
                f"train.global_batch_size ({self.train.global_batch_size}) must be divisible by "
                f"hardware.micro_batch_size ({self.hardware.micro_batch_size})"
            )
        if self.data.kind == "bytes" and self.model.vocab_size != 256:
            problems.append(f"data.kind bytes needs model.vocab_size 256, got {self.model.vocab_size}")
        if self.data.kind == "shards" and self.model.vocab_size > 65536:
            problems.append(f"uint16 shards hold at most 65536 token ids; model.vocab_size is {self.model.vocab_size}")
        if self.data.context_length > self.model.context_length:
            problems.append(
                f"data.context_length ({self.data.context_length}) exceeds model.context_length "
                f"({self.model.context_length})"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self
