import math

import pytest
import torch

from focus_tune.config.fields import check_lambda
from focus_tune.sim.regularization import LambdaSchedule, regularized_loss


def test_loss_equals_hand_computed_value():
    # B=1, L=2, c=2: logits (3, 4) and (0, 0); targets 1, 0; lambdas 0.5, 0.1.
    logits = torch.tensor([[[3.0, 4.0], [0.0, 0.0]]])
    targets = torch.tensor([[1, 0]])
    ce1 = -(4.0 - math.log(math.exp(3.0) + math.exp(4.0)))
    ce2 = math.log(2.0)
    expected = ce1 + 0.5 * 5.0 + ce2 + 0.1 * 0.0  # ||(3, 4)||_2 = 5, not squared
    loss = regularized_loss(logits, targets, torch.tensor([0.5, 0.1]))
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_loss_is_a_batch_mean_of_sequence_sums():
    torch.manual_seed(0)
    z, y = torch.randn(4, 3, 5), torch.randint(0, 5, (4, 3))
    lam = LambdaSchedule([0.1, 0.0, 0.2])
    per_item = [regularized_loss(z[b : b + 1], y[b : b + 1], lam) for b in range(4)]
    assert regularized_loss(z, y, lam).item() == pytest.approx(torch.stack(per_item).mean().item(), rel=1e-6)


def test_loss_refuses_lambdas_of_another_length():
    z, y = torch.zeros(1, 3, 2), torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="one value per entry"):
        regularized_loss(z, y, torch.zeros(2))
    with pytest.raises(ValueError, match="one value per entry"):
        regularized_loss(z, y, torch.zeros(1))  # would broadcast: one weight for every entry


@pytest.mark.parametrize("values, words", [
    ([0.0, -1.0, 0.0], "LambdaSchedule: lambda_2: -1.0 is negative; lambdas must be >= 0"),
    ([0.0, float("nan")], "LambdaSchedule: lambda_2: is NaN"),
    ([float("inf")], "LambdaSchedule: lambda_1: inf is not finite"),
])
def test_a_schedule_refuses_bad_lambdas(values, words):
    # The one place the values are checked: a schedule (and the config loader, through
    # check_lambda); the loss itself does not look at them on every batch.
    with pytest.raises(ValueError) as e:
        LambdaSchedule(values)
    assert str(e.value).startswith(words), str(e.value)


def test_check_lambda_is_the_rule():
    assert check_lambda(0.01) == 0.01
    assert str(check_lambda(-0.0)) == "0.0"  # so that equal schedules print alike
    with pytest.raises(ValueError, match=r"^-0.5 is negative; constants must be >= 0$"):
        check_lambda(-0.5, "constants")


def test_schedules_by_value():
    L = 300
    hero = LambdaSchedule.staged([0.01, 0.005, 0.005], 0.005, 6, L)
    assert hero.values[:7] == (0.01, 0.005, 0.005, 0.005, 0.005, 0.005, 0.0)
    assert str(hero) == "l1=0.01 l2..6=0.005 rest=0"
    # k2 <= k1: no joint entries, whatever lambda_all is.
    a = LambdaSchedule.staged([0.01, 0.05, 0.001], 0.05, 1, L)
    b = LambdaSchedule.staged([0.01, 0.05, 0.001], 0.001, 3, L)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert LambdaSchedule.constant(0.0, L) == LambdaSchedule.none(L)
    assert str(LambdaSchedule.constant(0.01, 4)) == "all=0.01"
    assert LambdaSchedule.staged([0.01], 0.005, 500, 10).values == (0.01,) + (0.005,) * 9
    with pytest.raises(ValueError, match="negative"):
        LambdaSchedule.constant(-0.1, 3)
    with pytest.raises(ValueError, match="NaN"):
        LambdaSchedule.staged([float("nan")], 0.0, 1, 3)
    with pytest.raises(ValueError, match="k2"):
        LambdaSchedule.staged([0.1], 0.1, 0, 3)
