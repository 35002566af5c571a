"""Typed errors of enlace_model. Messages say what is wrong and what to do."""


class CheckpointError(ValueError):
    """A checkpoint or exported folder is missing, incomplete, tampered with, or does not match
    its config. The message names the directory and the file or tensor at fault."""


class AttentionBackendError(RuntimeError):
    """The attention backend asked for cannot run here (device, dtype or shape), or is unknown."""
