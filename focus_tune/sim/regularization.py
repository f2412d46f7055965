"""Lambda schedules and the logit-regularized loss of the paper (eq. 2).

The loss of one sequence is

    sum_i [ -log p(y_i | x, y_<i) + lambda_i * ||z_i||_2 ]

where z_i is the logit vector of entry i. The penalty is the L2 norm of the logits, not its
square, and every entry i has its own lambda_i: the *schedule*.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..config.fields import check_lambda

if TYPE_CHECKING:  # torch is imported where a tensor is made: the config checks (and a CLI's flag errors) need none
    import torch


def check_lambdas(values: Sequence[float], what: str) -> tuple[float, ...]:
    """:func:`check_lambda` on each of lambda_1, lambda_2, ...; the error names ``what`` and i."""
    out = []
    for i, v in enumerate(values, start=1):
        try:
            out.append(check_lambda(v, "lambdas"))
        except ValueError as e:
            raise ValueError(f"{what}: lambda_{i}: {e}") from None
    return tuple(out)


class LambdaSchedule:
    """A vector lambda_1..lambda_L of non-negative regularization weights, one per entry.

    Build one with :meth:`none`, :meth:`constant` or :meth:`staged`. Two schedules are
    equal (and hash equal) when their vectors are equal, however they were built, so that
    equivalent search candidates can be trained once.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Sequence[float]):
        if len(values) == 0:
            raise ValueError("a schedule needs at least one entry")
        self._values = check_lambdas(values, "LambdaSchedule")

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def none(cls, length: int) -> "LambdaSchedule":
        """No regularization: lambda_i = 0 for every entry."""
        return cls([0.0] * _check_length(length))

    @classmethod
    def constant(cls, value: float, length: int) -> "LambdaSchedule":
        """lambda_i = value for every entry (the paper's constant regularization)."""
        return cls([float(value)] * _check_length(length))

    @classmethod
    def staged(
        cls, prefix: Sequence[float], lambda_all: float, k2: int, length: int
    ) -> "LambdaSchedule":
        """The paper's time-dependent schedule.

        prefix = [lambda_1..lambda_k1]; lambda_i = lambda_all for k1 < i <= k2; 0 after k2.
        k2 <= k1 means there are no joint entries (lambda_all is then irrelevant).
        """
        length = _check_length(length)
        prefix = check_lambdas(prefix, "staged schedule prefix")
        lambda_all = check_lambda(lambda_all, "staged schedule lambda_all")
        if int(k2) != k2 or k2 < 1:
            raise ValueError(f"staged schedule: k2 = {k2} must be a positive integer")
        k1 = len(prefix)
        if k1 > length:
            raise ValueError(f"staged schedule: k1 = {k1} entries exceed the length {length}")
        values = list(prefix) + [0.0] * (length - k1)
        for i in range(k1, min(int(k2), length)):  # 0-based i is entry i+1
            values[i] = lambda_all
        return cls(values)

    # -- value semantics ----------------------------------------------------------------
    @property
    def values(self) -> tuple[float, ...]:
        """The length-L vector (lambda_1, ..., lambda_L)."""
        return self._values

    def __len__(self) -> int:
        return len(self._values)

    def tensor(self, device=None, dtype=None) -> torch.Tensor:
        """The schedule as a [L] tensor (float32 unless ``dtype``)."""
        import torch

        return torch.tensor(self._values, device=device, dtype=dtype or torch.float32)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LambdaSchedule) and self._values == other._values

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"LambdaSchedule({self})"

    def __str__(self) -> str:
        """Run-length summary, e.g. ``l1=0.01 l2..6=0.005 rest=0``."""
        runs: list[tuple[int, int, float]] = []  # (first entry, last entry, value), 1-based
        for i, v in enumerate(self._values, start=1):
            if runs and runs[-1][2] == v:
                runs[-1] = (runs[-1][0], i, v)
            else:
                runs.append((i, i, v))
        parts = []
        for n, (a, b, v) in enumerate(runs):
            name = f"l{a}" if a == b else f"l{a}..{b}"
            if n == len(runs) - 1 and n > 0 and b == len(self._values) and a > 1:
                name = "rest"
            elif n == 0 and len(runs) == 1:
                name = "all"
            parts.append(f"{name}={v:g}")
        return " ".join(parts)


def _check_length(length: int) -> int:
    if int(length) != length or length < 1:
        raise ValueError(f"schedule length {length} must be a positive integer")
    return int(length)


def regularized_loss(
    logits: torch.Tensor, targets: torch.Tensor, lambdas: torch.Tensor | LambdaSchedule,
    observed: torch.Tensor | None = None,
) -> torch.Tensor:
    """Paper eq. 2, averaged over the batch: the one place it is written.

    logits: [B, L, c] teacher-forced logits z_i; targets: [B, L] class ids;
    lambdas: [L] (tensor or :class:`LambdaSchedule`). Padded entries are trained on, as in
    the paper. Returns a scalar: mean_b sum_i [CE(z_bi, y_bi) + lambda_i ||z_bi||_2].

    With a leading member axis (a pack, ``focus_tune.sim.packed``): logits [K, B, L, c],
    targets [K, B, L], lambdas [K, L] -> [K], each member's loss as above.

    ``observed``: bool [B, L] (or [K, B, L]) for right-censored data: only observed entries
    count, both terms (the logits of an unobserved entry are conditioned on filler), still
    averaged over the B items: mean_b sum_{i observed} [...]. None: every entry counts.

    The lambdas' values are not checked here (every batch would pay a device sync for a rule
    checked once, where they enter: :func:`check_lambda`). Only their length is: a schedule
    built for another sequence length would otherwise fail deep in broadcasting or, as a
    single value, silently weigh every entry alike.
    """
    import torch
    import torch.nn.functional as F

    if isinstance(lambdas, LambdaSchedule):
        lambdas = lambdas.tensor(device=logits.device, dtype=logits.dtype)
    if logits.ndim not in (3, 4):
        raise ValueError(f"logits must be [B, L, c] or [K, B, L, c], got shape {tuple(logits.shape)}")
    members = logits.ndim == 4
    *lead, L, c = logits.shape
    expected = (lead[0], L) if members else (L,)
    if lambdas.shape != expected:
        what = f"one value per entry ({L})" + (f" for each of the {lead[0]} members" if members else "")
        raise ValueError(f"lambdas must have {what}, got shape {tuple(lambdas.shape)}")
    lambdas = lambdas.to(device=logits.device, dtype=torch.float32)
    logits32 = logits.float()  # the loss in fp32 even under autocast
    ce = F.cross_entropy(logits32.reshape(-1, c), targets.reshape(-1), reduction="none").view(*lead, L)
    norms = torch.linalg.vector_norm(logits32, ord=2, dim=-1)  # (..., B, L): ||z_i||_2
    per_entry = ce + norms * (lambdas.unsqueeze(1) if members else lambdas)  # (..., B, L)
    if observed is not None:
        # where, not a product: an unobserved entry adds exactly 0 and passes no gradient.
        per_entry = torch.where(observed.to(per_entry.device), per_entry, 0.0)
    return per_entry.sum(dim=-1).mean(dim=-1) if members else per_entry.sum(dim=1).mean()
