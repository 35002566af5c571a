"""The optimisation: AdamW, the WSD schedule, batch sizes, intervals, seeds."""

from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from enlace_config.schema.base import FieldProblem, StrictModel


class TrainConfig(StrictModel):
    seed: int = Field(1337, ge=0, le=2**63 - 1)
    """Seeds model init, data order and sampling (0 .. 2**63-1: numpy wants it >= 0,
    torch.manual_seed a 64-bit integer)."""
    max_steps: PositiveInt
    """Optimizer steps in the whole run."""
    global_batch_size: PositiveInt
    """Sequences per optimizer step, over all devices. Gradient accumulation is derived:
    global_batch_size / (hardware.micro_batch_size * world size)."""
    lr: float = Field(..., gt=0, le=1)
    """Peak learning rate (the WSD plateau). Above 1 is surely a typo (3 for 3e-3)."""
    min_lr: NonNegativeFloat = 0.0
    """Learning rate at the end of the decay."""
    warmup_steps: NonNegativeInt = 0
    """Linear warmup steps from 0 to lr."""
    decay_steps: NonNegativeInt = 0
    """Steps of the final decay from lr to min_lr (the 'D' of WSD)."""
    decay_shape: Literal["linear", "cosine", "1-sqrt"] = "linear"
    """Shape of the decay phase."""
    optimizer: Literal["adamw", "muon"] = "adamw"
    """adamw: AdamW for every parameter. muon: Muon (orthogonalised momentum) for the hidden
    weight matrices, AdamW for embeddings, head, norms and gains."""
    muon_lr: PositiveFloat = 0.02
    """optimizer=muon: peak learning rate of the hidden matrices (lr is AdamW's)."""
    muon_momentum: float = Field(0.95, gt=0, lt=1)
    """optimizer=muon: Nesterov momentum."""
    muon_ns_steps: PositiveInt = Field(5, le=20)
    """optimizer=muon: Newton-Schulz iterations per update."""
    weight_decay: NonNegativeFloat = 0.1
    """AdamW weight decay (matrices only)."""
    decay_embeddings: bool = False
    """Apply weight decay to the embedding too."""
    beta1: float = Field(0.9, gt=0, lt=1)
    """AdamW beta1."""
    beta2: float = Field(0.95, gt=0, lt=1)
    """AdamW beta2."""
    eps: PositiveFloat = 1e-8
    """AdamW epsilon."""
    grad_clip: NonNegativeFloat = 1.0
    """Max global gradient norm (0: no clipping)."""
    z_loss_weight: NonNegativeFloat = 1e-4
    """Weight of the z-loss term."""
    copy_records_share: float = Field(default=0.0, ge=0, le=1)
    """Share of the training rows replaced by synthetic copy records («qwhfk|qwhfk» in bytes, «A A»
    of token ids: enlace_data/copy_records.py) at step 0, falling linearly to none at
    copy_records_steps (0: not falling). Dense copy signal early in pretraining, so that a small
    base forms the attention that copies from its context; in chat runs, kept through the
    fine-tuning so that the chat data does not erase it (issue 35). 0: the data as it is."""
    copy_records_steps: NonNegativeInt = 0
    """Step at which the copy records' share has fallen to zero (see copy_records_share); 0: it
    does not fall, the same share for the whole run (a chat fine-tuning's)."""
    copy_records_beside: bool = False
    """Copy records beside the rows instead of in their place: every row of a micro-batch kept,
    and copy_records_share of the row count (rounded) added as record rows after them. The data
    is seen as without records, at the price of more rows to compute (up to 1 + the share times
    as many; the log's tokens per second count the data's rows) and their memory. On the 350-step
    smoke base, records replacing half the rows cost 0.13 bits/byte on the books (2.30 against
    2.17 without records), added beside them 0.02 (2.19; benchmarks/CHAT.md, fifteenth session)."""
    copy_records_letters: int = Field(default=74, ge=2, le=74)
    """Byte records (letters and recall): how many symbols of enlace_data/copy_records.py's
    alphabet the records draw from, in its order: 32 lower-case letters, 32 capitals, 10 digits
    (74: all; 32: the lower case alone, the records before the capitals and digits were added). A
    copy head copies only the bytes its records hold: the family's names start with a capital and
    its facts are numbers. With few letters, one does not tell where a copy stands (it occurs
    several times nearby), so the model must learn to match several bytes."""
    copy_records_source: Literal["letters", "text", "recall", "letters+recall"] = "letters"
    """What the copy records copy: 5-8 random letters (4-8 random ordinary ids in token shards),
    spans of the row's own text (10-20 bytes, or 4-8 ids: several bytes, not one, tell where a span
    of natural text stands), recall records (bytes only: «ab=qwhf cd=zmu|cd=zmu ab=qwhf», each
    value's first byte found by its key's several bytes, as a name's first letter by «se llama »),
    or letters+recall (each record row one or the other, half and half)."""
    copy_records_joins: list[Annotated[str, Field(pattern=r"^[^|,\n]{1,8}$")]] = Field(
        default_factory=lambda: ["="], min_length=1
    )
    """Recall records: what joins a key to its value, one drawn for each record (1-8 characters
    without «|», «,» or a line break, which the records' own format uses). «=» alone (the
    default, the records of before, row for row) lets a value's first byte be found by 3 bytes
    («cd=»); joins such as « de » or « de la » make it 4-9 («cd de la »), the key a query needs
    after «estación de tren de » to tell «tren» from «Jaén» (benchmarks/CHAT.md, fourteenth
    session: the longer CPU recipe's base and warm-up)."""
    aba_rows_share: float = Field(default=0.0, ge=0, le=1)
    """«A B A» rows beside the data's (data.kind bytes or shards): from step aba_rows_from on,
    this share of a micro-batch's row count (rounded) added after its rows, each made of a row's
    own text, A 10-30 bytes or ids of it, B the 5-25 after, then A again, trained on the repeats
    only (enlace_data/copy_records.py `aba_row`). Copy records teach a head to copy from a place a
    cue marks; these, to copy text found by its content, with no cue (the books' «A B A» probe of
    benchmarks/copy_probe.py). Rows to compute: up to 1 + the share times as many from that step.
    On the longer CPU recipe's base, 1.0 from step 350 of 700 gives the books' gap (+38.8 points,
    2.1493 bits/byte: medians of 3 seeds); in 350 steps the books' model loses to them what they
    teach (benchmarks/CHAT.md, twenty-fifth session). 0: none."""
    aba_rows_from: NonNegativeInt = 0
    """The step from which the «A B A» rows come (aba_rows_share)."""
    log_every: PositiveInt = 10
    """Steps between log lines / metrics rows."""
    eval_every: PositiveInt = 100
    """Steps between validation evaluations."""
    checkpoint_every: PositiveInt = 500
    """Steps between checkpoints."""
    keep_checkpoints: PositiveInt = 3
    """How many recent checkpoints to keep."""
    init_from: str | None = None
    """Start a new run from this checkpoint's weights (not an exact resume)."""
    init_optimizer: bool = False
    """With init_from: also take the checkpoint's optimizer state."""
    parallelism: Literal["ddp", "fsdp"] = "ddp"
    """Under torchrun: data parallel (ddp) or sharded (fsdp, FSDP2)."""
    on_corrupt_checkpoints: Literal["stop", "restart"] = "stop"
    """When the run directory holds checkpoints and none of them can be resumed (damaged,
    incomplete, not this model's): stop and list them (stop), or start the run over from step 0
    (restart), moving them and metrics.jsonl to checkpoints/corrupt/."""
    max_skipped_steps_in_a_row: PositiveInt = 50
    """float16 with a GradScaler: optimizer steps skipped for inf/nan gradients are expected now
    and then; this many in a row stops the run (it is diverging). In float32 and bfloat16 the
    first non-finite loss or gradient stops it."""
    allow_thread_change: bool = False
    """On resume, accept a CPU thread count different from the checkpoint's. Thread count changes
    floating-point sums: the resumed run is no longer bit-exact."""

    def _problems(self) -> Iterator[FieldProblem]:
        if self.warmup_steps + self.decay_steps > self.max_steps:
            yield FieldProblem(
                "decay_steps",
                f"warmup_steps {self.warmup_steps} + decay_steps {self.decay_steps} = "
                f"{self.warmup_steps + self.decay_steps} exceeds max_steps {self.max_steps}: "
                "the schedule would not finish its decay",
                ("warmup_steps", "max_steps"),
            )
        if self.min_lr > self.lr:
            yield FieldProblem(
                "min_lr",
                f"min_lr {self.min_lr:g} is above lr {self.lr:g}: the decay goes from lr down "
                "to min_lr",
                ("lr",),
            )
        if self.copy_records_beside and self.copy_records_share == 0:
            yield FieldProblem(
                "copy_records_beside",
                "copy_records_beside is true but copy_records_share is 0: there are no records "
                "to add beside the rows; set the share (0.5: half as many record rows again)",
                ("copy_records_share",),
            )
        if self.aba_rows_share and self.aba_rows_from >= self.max_steps:
            yield FieldProblem(
                "aba_rows_from",
                f"aba_rows_from {self.aba_rows_from} is not before max_steps {self.max_steps}: "
                "no «A B A» row would be trained; set a step before the end, or aba_rows_share 0",
                ("aba_rows_share", "max_steps"),
            )
        if self.init_optimizer and self.init_from is None:
            yield FieldProblem(
                "init_optimizer",
                "init_optimizer is true but init_from is not set: there is no checkpoint to "
                "take the optimizer state from",
                ("init_from",),
            )
        if self.optimizer == "muon" and self.parallelism == "fsdp":
            yield FieldProblem(
                "optimizer",
                "optimizer muon needs whole matrices to orthogonalise, and fsdp shards them: "
                "use optimizer adamw with fsdp, or parallelism ddp",
                ("parallelism",),
            )
