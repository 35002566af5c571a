"""What every schema shares: the strict base class and the way cross-field checks report problems.

A model with cross-field checks overrides `_problems` and yields one `FieldProblem` per broken rule,
naming the key it is about (relative to the model) and the other keys involved; the loader reports
each with its full dotted key and where every involved value was set. A plain `ValueError` raised
by a validator still works; it is reported against the section as a whole.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, model_validator

MAX_UINT16_VOCAB = 65536  # token ids in uint16 shards


@dataclass(frozen=True)
class FieldProblem:
    """One broken cross-field rule: `key` is dotted and relative to the model whose validator
    raises (`"n_heads"` in ModelConfig, `"train.global_batch_size"` in RunConfig)."""

    key: str
    message: str
    related: tuple[str, ...] = ()


class FieldProblems(ValueError):
    """Raised by a model validator: every broken rule of that model at once."""

    def __init__(self, problems: Iterable[FieldProblem]) -> None:
        self.problems: tuple[FieldProblem, ...] = tuple(problems)
        super().__init__("; ".join(f"{p.key}: {p.message}" for p in self.problems))


def repeated(items: Sequence[str]) -> list[str]:
    """The items that occur more than once, sorted."""
    return sorted({item for item in items if items.count(item) > 1})


class StrictModel(BaseModel):
    """Unknown keys are errors, assignments are validated, NaN and infinity are refused.

    A field's docstring is its description (`enlace-config keys` prints it): defaults stay readable
    at a glance, and the help still has one home.
    """

    model_config = ConfigDict(
        extra="forbid",
        validate_assignment=True,
        allow_inf_nan=False,
        strict=True,
        use_attribute_docstrings=True,
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        for info in cls.model_fields.values():  # a docstring's line breaks are only wrapping
            info.description = " ".join(info.description.split()) if info.description else None

    def _problems(self) -> Iterable[FieldProblem]:
        return ()

    @model_validator(mode="after")
    def _check_across_fields(self) -> Self:
        problems = tuple(self._problems())
        if problems:
            raise FieldProblems(problems)
        return self
