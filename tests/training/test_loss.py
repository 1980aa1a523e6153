"""Tests for training.loss: the multi-positive InfoNCE of NPM, against hand numbers and a loop reference."""

from __future__ import annotations

import math

import pytest
import torch

from training.loss import multi_positive_nce, npm_loss


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def _b(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


def reference(q, c, positive, allowed, scale) -> torch.Tensor:
    """Plain loops, float64: mean over rows with an allowed positive of -log(sum_pos e^s / sum_allowed e^s)."""
    losses = []
    for i in range(q.shape[0]):
        num, den = [], []
        for j in range(c.shape[0]):
            if not allowed[i, j]:
                continue
            s = sum(q[i, k].double() * c[j, k].double() for k in range(q.shape[1])) * scale
            e = torch.exp(s)
            den.append(e)
            if positive[i, j]:
                num.append(e)
        if num:
            losses.append(-torch.log(sum(num) / sum(den)))
    if not losses:
        return torch.zeros((), dtype=torch.float64)
    return sum(losses) / len(losses)


def test_hand_computed_2x2():
    q = _t([[1.0, 0.0], [0.0, 1.0]])
    c = _t([[2.0, 0.0], [1.0, 1.0]])
    scale = 0.5
    # scores: row 0 -> [1.0, 0.5]; row 1 -> [0.0, 0.5]
    pos = _b([[True, False], [False, True]])
    allowed = _b([[True, True], [True, True]])
    row0 = -math.log(math.exp(1.0) / (math.exp(1.0) + math.exp(0.5)))
    row1 = -math.log(math.exp(0.5) / (math.exp(0.0) + math.exp(0.5)))
    got = multi_positive_nce(q, c, pos, allowed, scale)
    assert got.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)

    # two positives in row 0: numerator sums both; row 1 may only see candidate 1 -> loss 0
    pos2 = _b([[True, True], [False, True]])
    allowed2 = _b([[True, True], [False, True]])
    got2 = multi_positive_nce(q, c, pos2, allowed2, scale)
    assert got2.item() == pytest.approx((0.0 + 0.0) / 2, abs=1e-6)

    pos3 = _b([[False, True], [False, True]])
    row0_3 = -math.log(math.exp(0.5) / (math.exp(1.0) + math.exp(0.5)))
    got3 = multi_positive_nce(q, c, pos3, allowed2, scale)
    assert got3.item() == pytest.approx((row0_3 + 0.0) / 2, rel=1e-6)


def test_scale_multiplies_the_dot_product():
    q = _t([[1.0, 2.0]])
    c = _t([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    pos = _b([[True, False, False]])
    allowed = torch.ones(1, 3, dtype=torch.bool)
    for scale in (1.0, 0.25, 1 / math.sqrt(2)):
        s = [1.0 * scale, 2.0 * scale, 3.0 * scale]
        want = -math.log(math.exp(s[0]) / sum(math.exp(x) for x in s))
        assert multi_positive_nce(q, c, pos, allowed, scale).item() == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_matches_loop_reference(seed):
    g = torch.Generator().manual_seed(seed)
    m, n, d = 7, 11, 5
    q = torch.randn(m, d, generator=g, dtype=torch.float64) * 3
    c = torch.randn(n, d, generator=g, dtype=torch.float64) * 3
    allowed = torch.rand(m, n, generator=g) < 0.7
    positive = torch.rand(m, n, generator=g) < 0.3  # may include not-allowed cells, and rows with none
    scale = 1 / math.sqrt(d)
    q1, c1 = q.clone().float().requires_grad_(), c.clone().float().requires_grad_()
    got = multi_positive_nce(q1, c1, positive, allowed, scale)
    q2, c2 = q.clone().requires_grad_(), c.clone().requires_grad_()
    want = reference(q2, c2, positive, allowed, scale)
    assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6)
    got.backward()
    want.backward()
    torch.testing.assert_close(q1.grad.double(), q2.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(c1.grad.double(), c2.grad, rtol=1e-4, atol=1e-6)


def test_rows_without_positives_are_ignored():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(4, 3, generator=g)
    c = torch.randn(6, 3, generator=g)
    allowed = torch.ones(4, 6, dtype=torch.bool)
    pos = torch.zeros(4, 6, dtype=torch.bool)
    pos[0, 1] = pos[0, 4] = pos[2, 3] = True  # rows 1 and 3 have no positive
    qg = q.clone().requires_grad_()
    full = multi_positive_nce(qg, c, pos, allowed, 0.5)
    only = multi_positive_nce(q[[0, 2]], c, pos[[0, 2]], allowed[[0, 2]], 0.5)
    assert full.item() == pytest.approx(only.item(), rel=1e-6)  # mean over 2 rows, not 4
    full.backward()
    assert torch.all(qg.grad[[1, 3]] == 0)
    assert torch.all(qg.grad[[0, 2]].abs().sum(1) > 0)
    # a row whose only positives are not allowed counts as a row without positives
    pos2 = pos.clone()
    pos2[1, 5] = True
    allowed2 = allowed.clone()
    allowed2[1, 5] = False
    assert multi_positive_nce(q, c, pos2, allowed2, 0.5).item() == pytest.approx(only.item(), rel=1e-6)


def test_not_allowed_candidates_have_no_effect_even_if_positive():
    g = torch.Generator().manual_seed(2)
    q = torch.randn(3, 4, generator=g)
    c = torch.randn(5, 4, generator=g)
    pos = _b([[1, 0, 1, 0, 0], [0, 1, 0, 0, 1], [0, 0, 0, 1, 1]])
    allowed = _b([[1, 1, 0, 1, 1], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    base = multi_positive_nce(q, c, pos, allowed, 0.5)
    # same as if the forbidden positives were not positive
    assert base.item() == pytest.approx(multi_positive_nce(q, c, pos & allowed, allowed, 0.5).item(), rel=1e-6)
    # a forbidden candidate's vector is irrelevant for the row that may not see it
    for row, hidden in ((0, 2), (1, 4)):
        c2 = c.clone()
        c2[hidden] = 100.0 if hidden == 2 else -100.0
        a = multi_positive_nce(q[[row]], c, pos[[row]], allowed[[row]], 0.5)
        b = multi_positive_nce(q[[row]], c2, pos[[row]], allowed[[row]], 0.5)
        assert a.item() == pytest.approx(b.item(), rel=1e-6)
        # ... but not for a row that may see it
        a = multi_positive_nce(q[[2]], c, pos[[2]], allowed[[2]], 0.5)
        b = multi_positive_nce(q[[2]], c2, pos[[2]], allowed[[2]], 0.5)
        assert a.item() != pytest.approx(b.item(), rel=1e-3)
    cg = c.clone().requires_grad_()
    multi_positive_nce(q[[0]], cg, pos[[0]], allowed[[0]], 0.5).backward()
    assert torch.all(cg.grad[2] == 0) and cg.grad[0].abs().sum() > 0


def test_no_positive_at_all_gives_zero_with_graph():
    q = torch.randn(3, 4, requires_grad=True)
    c = torch.randn(5, 4, requires_grad=True)
    allowed = torch.ones(3, 5, dtype=torch.bool)
    loss = multi_positive_nce(q, c, torch.zeros(3, 5, dtype=torch.bool), allowed, 0.5)
    assert loss.item() == 0.0
    assert loss.requires_grad
    loss.backward()
    assert q.grad is not None and torch.all(q.grad == 0)
    # positives that are all forbidden: same
    loss2 = multi_positive_nce(q, c, torch.ones(3, 5, dtype=torch.bool), torch.zeros(3, 5, dtype=torch.bool), 0.5)
    assert loss2.item() == 0.0 and loss2.requires_grad


def test_large_scores_are_stable():
    q = _t([[100.0, 0.0], [0.0, 100.0]])
    c = _t([[100.0, 0.0], [0.0, 100.0], [-100.0, 0.0]])
    pos = _b([[0, 1, 0], [0, 1, 0]])
    allowed = torch.ones(2, 3, dtype=torch.bool)
    loss = multi_positive_nce(q, c, pos, allowed, 1.0)  # row 0: 1e4 vs 0 -> loss 1e4; row 1: ~0
    assert torch.isfinite(loss)
    assert loss.item() == pytest.approx(1e4 / 2, rel=1e-4)


def test_npm_loss_returns_start_and_end_parts():
    g = torch.Generator().manual_seed(3)
    qs, qe = torch.randn(4, 6, generator=g), torch.randn(4, 6, generator=g)
    c = torch.randn(9, 6, generator=g)
    ps = torch.rand(4, 9, generator=g) < 0.3
    pe = torch.rand(4, 9, generator=g) < 0.3
    ps[:, 0] = True
    pe[:, 1] = True
    allowed = torch.rand(4, 9, generator=g) < 0.8
    allowed[:, :2] = True
    scale = 1 / math.sqrt(6)
    l_start, l_end = npm_loss(qs, qe, c, ps, pe, allowed, scale)
    assert l_start.item() == pytest.approx(reference(qs, c, ps, allowed, scale).item(), rel=1e-5)
    assert l_end.item() == pytest.approx(reference(qe, c, pe, allowed, scale).item(), rel=1e-5)
    assert l_start.item() != pytest.approx(l_end.item())
