"""What every schema shares: the strict base class and the way cross-field checks report problems.

Cross-field checks (model validators) should raise `FieldProblems`, one `FieldProblem` per broken
rule, each naming the key it is about (relative to the model that raises) and the other keys
involved. The loader then reports every problem with its full dotted key and the file and line each
involved value came from, instead of one sentence pinned on the whole section. A plain `ValueError`
still works; it is reported against the section as a whole.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict


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


@dataclass(frozen=True)
class FieldProblem:
    """One broken cross-field rule.

    `key` is dotted and relative to the model whose validator raises (`"n_heads"` inside
    ModelConfig, `"train.global_batch_size"` inside RunConfig); `related` are the other keys whose
    values the rule involves, so that the message can say where each of them was set.
    """

    key: str
    message: str
    related: tuple[str, ...] = ()


class FieldProblems(ValueError):
    """Raised by a model validator: every broken rule of that model at once."""

    def __init__(self, problems: Iterable[FieldProblem]) -> None:
        self.problems: tuple[FieldProblem, ...] = tuple(problems)
        super().__init__("; ".join(f"{p.key}: {p.message}" for p in self.problems))


def raise_problems(problems: Iterable[FieldProblem]) -> None:
    """Raise `FieldProblems` when there is at least one problem; do nothing otherwise."""
    found = tuple(problems)
    if found:
        raise FieldProblems(found)
