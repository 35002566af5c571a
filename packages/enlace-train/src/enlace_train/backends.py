"""The one training file that knows how boards differ.

`setup_backend(hardware_config)` asks torch what this machine is (a CPU, or a CUDA board with its
name and compute capability), checks the profile against it, and returns a `Backend` (device,
autocast, GradScaler, fused AdamW, memory) or raises `HardwareError` listing every problem at
once, with the profile to use instead. Nothing falls back silently.

Rules (CUDA): a profile that names a compute capability runs on that board only, unless
`hardware.allow_other_board` (the GPU check runs the 2060's float16 path on an H200 that way);
bfloat16 needs it in silicon (sm_80+); flash attention needs sm_80+ and a 16-bit dtype;
torch.compile needs Triton and sm_70+. A machine without CUDA is told apart from a driver too old
for the torch build. On CPU, bfloat16 needs AVX512-BF16 or AMX (where it has them, it is the
faster dtype: configs/hardware/cpu-bf16.yaml); float16 autocast is allowed (slow, but it exercises
the 2060's mixed-precision path) and torch.compile needs a C++ compiler. The torch.cuda and
torch.cpu functions called here are few on purpose: the tests simulate boards by substituting
exactly these.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import resource
import shutil
from dataclasses import dataclass
from typing import Any

import torch
from enlace_config.schema import HardwareConfig

from enlace_train.errors import HardwareError

CPU_PROFILE = "configs/hardware/cpu.yaml (device cpu, float32)"
TURING_PROFILE = (
    "configs/hardware/turing-2060.yaml (float16 + GradScaler, mem_efficient attention), or the "
    "overrides hardware.dtype=float16 hardware.loss_scaling=true hardware.attention=mem_efficient"
)
AMPERE_PLUS_PROFILE = (
    "configs/hardware/blackwell-5090.yaml (bfloat16, flash attention) with this board's "
    "micro_batch_size and peak_flops"
)


@dataclass(frozen=True)
class Board:
    """What this machine reports: the device kind, the board's name and its compute capability."""

    device: str  # "cpu" or "cuda"
    name: str
    capability: tuple[int, int] | None = None
    bf16_native: bool = False

    def describe(self) -> str:
        if self.capability is None:
            bf16 = "with" if self.bf16_native else "without"
            return f"{self.name}, no compute capability (CPU, {bf16} bfloat16 instructions)"
        major, minor = self.capability
        return f"{self.name}, compute capability {major}.{minor} (sm_{major}{minor})"


def _cpu_board() -> Board:
    return Board(
        device="cpu", name=f"CPU ({os.cpu_count()} cores)", bf16_native=cpu_bf16_in_silicon()
    )


def cpu_bf16_in_silicon() -> bool:
    """AVX512-BF16 or AMX: bfloat16 matrix products in the CPU's instructions (on CI's 2 EPYC
    cores the chat script's fine-tuning trains 1.27x faster, benchmarks/bench_cpu_dtype.py);
    without them torch emulates bfloat16, slower than float32."""
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:  # a torch without these probes: do not assume the instructions
        return False


def _bf16_in_silicon(capability: tuple[int, int]) -> bool:
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch versions before the argument existed: ask the compute capability
        return capability >= (8, 0)


def _why_no_cuda() -> str:
    """Tell a CPU-only machine apart from a GPU whose driver is too old for this torch build."""
    if torch.version.cuda is None:
        return (
            "this torch build has no CUDA support at all (a CPU-only wheel); install the CUDA build"
        )
    try:
        torch.cuda.init()
        reason = "torch.cuda.is_available() is False"
    except Exception as exc:  # torch reports the cause only through the message
        reason = str(exc).strip()
    if "too old" in reason.lower():
        return (
            f"a GPU is present but its NVIDIA driver is too old for this torch build (built for "
            f"CUDA {torch.version.cuda}); update the driver. torch says: {reason}"
        )
    return f"this machine has no usable NVIDIA GPU (CPU-only). torch says: {reason}"


def detect_cuda_board() -> Board:
    """The first CUDA device as torch reports it. Call only when torch.cuda.is_available()."""
    major, minor = torch.cuda.get_device_capability(0)
    cap = (int(major), int(minor))
    name = str(torch.cuda.get_device_name(0))
    return Board(device="cuda", name=name, capability=cap, bf16_native=_bf16_in_silicon(cap))


def _has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def _find_cxx() -> str | None:
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else []
    return next(filter(None, map(shutil.which, [*candidates, "g++", "c++", "clang++"])), None)


def check_profile(hw: HardwareConfig, board: Board) -> list[str]:
    """Every way the profile asks `board` for something it cannot do natively (empty: all good)."""
    problems: list[str] = []
    if board.device == "cuda" and board.capability is not None:
        expected = hw.compute_capability
        if (
            expected is not None
            and tuple(expected) != board.capability
            and not hw.allow_other_board
        ):
            problems.append(
                f"hardware.compute_capability={expected[0]}.{expected[1]}: this profile is sized "
                f"for that board (micro_batch_size, peak_flops), not this one (to run it here "
                f"anyway, e.g. to test its precision path, add hardware.allow_other_board=true)"
            )
        if hw.dtype == "bfloat16" and not board.bf16_native:
            problems.append(
                "hardware.dtype=bfloat16, but this board has no bfloat16 in silicon (it needs "
                "sm_80+; torch would emulate it slowly)"
            )
        if hw.attention == "flash" and board.capability < (8, 0):
            problems.append(
                "hardware.attention=flash, but the flash attention kernel needs sm_80+ "
                "(use mem_efficient)"
            )
        if hw.attention == "flash" and hw.dtype == "float32":
            problems.append(
                "hardware.attention=flash with hardware.dtype=float32: the flash kernel runs in "
                "float16/bfloat16 only (use a 16-bit dtype, or attention mem_efficient/auto)"
            )
        if hw.compile and board.capability < (7, 0):
            problems.append("hardware.compile=true, but torch.compile's Triton kernels need sm_70+")
        if hw.compile and not _has_triton():
            problems.append(
                "hardware.compile=true, but Triton is not installed (torch.compile needs it on CUDA)"
            )
    elif board.device == "cpu":
        if hw.dtype == "bfloat16" and not board.bf16_native:
            problems.append(
                "hardware.dtype=bfloat16, but this CPU has no bfloat16 instructions (AVX512-BF16 "
                "or AMX; torch would emulate them, slower than float32): use "
                "hardware.dtype=float32 (scripts/chat-cpu.sh: --float32)"
            )
        if hw.compile and _find_cxx() is None:
            problems.append(
                "hardware.compile=true, but no C++ compiler was found (torch.compile on CPU needs "
                "g++ or clang++; set CXX or install one, or use hardware.compile=false)"
            )
    return problems


def detect_board(hw: HardwareConfig) -> Board:
    """The board the profile will run on, or HardwareError when CUDA is asked and not there."""
    if hw.device == "cpu":
        return _cpu_board()
    if not torch.cuda.is_available():
        raise HardwareError(
            f"Hardware profile '{hw.name}' asks for hardware.device=cuda, but {_why_no_cuda()}. "
            f"Board: {_cpu_board().describe()}. Use instead: {CPU_PROFILE}."
        )
    return detect_cuda_board()


@dataclass
class Backend:
    """Everything the training loop needs to know about the device, decided once at start-up."""

    hw: HardwareConfig
    board: Board

    @property
    def device(self) -> torch.device:
        return torch.device(self.hw.device)

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        return None if self.hw.dtype == "float32" else getattr(torch, self.hw.dtype)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        dtype = self.autocast_dtype
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.hw.device, dtype=dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """Enabled exactly when the profile scales the loss (always for float16)."""
        return torch.amp.GradScaler(
            self.hw.device,
            init_scale=self.hw.grad_scaler_init_scale,
            growth_interval=self.hw.grad_scaler_growth_interval,
            enabled=self.hw.loss_scaling,
        )

    @property
    def fused_adamw(self) -> bool:
        return self.hw.device == "cuda"

    def to_device(self, array: Any) -> torch.Tensor:
        tensor = torch.from_numpy(array)
        if self.hw.device == "cuda":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor

    def synchronize(self) -> None:
        if self.hw.device == "cuda":
            torch.cuda.synchronize()

    def peak_memory_mb(self) -> float:
        """Peak memory so far: max allocated on CUDA, the process's peak RSS on CPU."""
        if self.hw.device == "cuda":
            return torch.cuda.max_memory_allocated() / 2**20
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB

    def memory_bytes(self) -> int:
        """All the memory of the device a run trains on: the GPU's, or the machine's RAM."""
        if self.hw.device == "cuda":
            return torch.cuda.get_device_properties(self.device).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    def rng_state(self) -> list[torch.Tensor]:
        return list(torch.cuda.get_rng_state_all()) if self.hw.device == "cuda" else []

    def set_rng_state(self, states: list[torch.Tensor]) -> None:
        if self.hw.device == "cuda" and states:
            torch.cuda.set_rng_state_all(states)

    def describe(self) -> str:
        return f"{self.board.describe()}; profile '{self.hw.name}': {self.hw.dtype}, attention {self.hw.attention}"


def setup_backend(hw: HardwareConfig) -> Backend:
    """Validate the profile against this machine and configure torch for it."""
    board = detect_board(hw)
    problems = check_profile(hw, board)
    if problems:
        listed = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        cap = board.capability
        instead = (
            CPU_PROFILE if cap is None else TURING_PROFILE if cap < (8, 0) else AMPERE_PLUS_PROFILE
        )
        raise HardwareError(
            f"Hardware profile '{hw.name}' does not fit this machine's board {board.describe()}: "
            f"{listed}. Use instead: {instead}."
        )
    if hw.num_threads is not None:
        torch.set_num_threads(hw.num_threads)
    if board.device == "cuda" and board.capability is not None and board.capability >= (8, 0):
        # float32 matmuls on sm_80+ go through TF32 tensor cores (what "float32" costs on them).
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return Backend(hw=hw, board=board)
