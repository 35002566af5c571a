"""Typed errors of the trainer. Each one is something the user can act on: the CLI prints its message
(one paragraph with the fix) and exits 2, without a traceback unless --debug."""


class TrainError(Exception):
    """Base class of the trainer's user-facing errors."""


class HardwareError(TrainError):
    """The hardware profile asks this machine for something it cannot do natively."""


class ResumeError(TrainError):
    """The run directory's checkpoint cannot be continued with this configuration."""


class SetupError(TrainError):
    """Data and model do not fit together, or the run directory cannot be prepared."""


class OutOfMemory(TrainError):
    """The device ran out of memory at the profile's micro-batch size."""


class Diverged(TrainError):
    """The loss or the gradients stopped being finite numbers: training cannot go on."""
