"""The hardware profile: which board, which precision, which attention kernel, how much per step."""

from collections.abc import Iterator
from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from enlace_config.schema.base import FieldProblem, StrictModel


class HardwareConfig(StrictModel):
    name: str = "cpu"
    """Human-readable name of the board this profile is for."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Where training runs."""
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    """Compute precision (autocast); weights stay float32."""
    loss_scaling: bool = False
    """Use a GradScaler (dynamic loss scaling). Required for float16."""
    grad_scaler_init_scale: PositiveFloat = 2.0**16
    """GradScaler initial scale."""
    grad_scaler_growth_interval: PositiveInt = 2000
    """GradScaler: steps without inf/nan before the scale grows."""
    attention: Literal["flash", "mem_efficient", "math", "auto"] = "auto"
    """Scaled-dot-product attention backend, enforced (no silent fallback)."""
    micro_batch_size: PositiveInt = Field(..., le=65536)
    """Sequences per forward/backward pass on one device."""
    compile: bool = False
    """Wrap the model in torch.compile."""
    peak_flops: PositiveFloat | None = None
    """The board's peak FLOP/s at this dtype, for MFU. None: MFU not reported."""
    num_threads: PositiveInt | None = Field(None, le=1024)
    """CPU threads for torch (None: torch's default). Part of exactness."""
    openmp_spin_count: NonNegativeInt = Field(0, le=10**9)
    """CPU runs: how long an idle OpenMP thread spins before it sleeps (libgomp's GOMP_SPINCOUNT,
    set by enlace-train before torch loads; an exported GOMP_SPINCOUNT or OMP_WAIT_POLICY wins).
    0 sleeps at once: safest when other jobs share the cores. 10**9 spins last seconds: beyond,
    export OMP_WAIT_POLICY=ACTIVE."""
    compute_capability: list[NonNegativeInt] | None = Field(None, min_length=2, max_length=2)
    """CUDA only: the compute capability [major, minor] of the board this profile is sized for
    (micro-batch, peak_flops). Another board is refused at start-up unless allow_other_board is
    true. None: any board."""
    allow_other_board: bool = False
    """Run this profile on a board whose compute capability is not the profile's
    compute_capability (e.g. the 2060 profile's float16 path on a bigger GPU for a test). Dtype
    and kernel checks still apply; micro_batch_size and peak_flops stay the profile's."""

    def _problems(self) -> Iterator[FieldProblem]:
        # loss_scaling with float32/bfloat16 is allowed and ignored by the trainer, so that an
        # override like `hardware.dtype=float32` on a float16 profile needs no second override.
        if self.dtype == "float16" and not self.loss_scaling:
            yield FieldProblem(
                "loss_scaling",
                "dtype float16 needs loss_scaling: true (without a GradScaler small gradients "
                "underflow to zero in float16)",
                ("dtype",),
            )
