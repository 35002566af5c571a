"""The Enlace decoder-only transformer: model, generation, checkpoints and export.

Importing this package imports torch and nothing heavier: transformers, numpy and the tokenizer
libraries are never needed to build, train, load or run a model.
"""

from importlib.metadata import version as _version

from enlace_model.checkpoint import (
    TRAINER_STATE_FILE,
    atomic_checkpoint,
    find_latest_checkpoint,
    list_checkpoints,
    load_model,
    resolve_checkpoint,
    save_model,
)
from enlace_model.errors import AttentionBackendError, CheckpointError
from enlace_model.generation import generate, generate_stream
from enlace_model.model import (
    ModelOutput,
    Transformer,
    build_model,
    count_parameters,
    flops_per_token,
)

__version__ = _version("enlace-model")

__all__ = [
    "TRAINER_STATE_FILE",
    "AttentionBackendError",
    "CheckpointError",
    "ModelOutput",
    "Transformer",
    "__version__",
    "atomic_checkpoint",
    "build_model",
    "count_parameters",
    "find_latest_checkpoint",
    "flops_per_token",
    "generate",
    "generate_stream",
    "list_checkpoints",
    "load_model",
    "resolve_checkpoint",
    "save_model",
]
