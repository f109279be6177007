"""The gradient noise-scale estimators (repro.runtime.noise_scale) on problems with known gradient
covariance."""

import pytest
import torch

from repro.runtime.noise_scale import MicroBatchNorms, NoiseScaleEMA, two_batch_estimates


def test_b_simple_of_linear_regression_matches_the_analytic_value():
    """Loss 1/2 (x.w - y)^2, x ~ N(0, I_d), y = x.w* + N(0, s^2): per-example gradient
    x (x.delta - eps) with delta = w - w*, so |G|^2 = |delta|^2 and
    tr(Sigma) = (d + 1)|delta|^2 + s^2 d."""
    torch.manual_seed(0)
    d, noise, micro, n_micro = 8, 0.5, 4, 8
    w_star = torch.randn(d)
    w = torch.nn.Parameter(w_star + 0.3 * torch.randn(d))
    delta_sq = (w.detach() - w_star).pow(2).sum().item()
    expected = ((d + 1) * delta_sq + noise**2 * d) / delta_sq
    ema = NoiseScaleEMA(decay=0.999)
    for _ in range(3000):
        norms = MicroBatchNorms(stacked=False)
        for _ in range(n_micro):
            x = torch.randn(micro, d)
            y = x @ w_star + noise * torch.randn(micro)
            (0.5 * (x @ w - y).pow(2).mean() / n_micro).backward()
            norms.add([w], n_micro)
        small_sq = norms.restore([w])
        ema.update(small_sq.item(), w.grad.pow(2).sum().item(), micro, micro * n_micro)
        w.grad = None
    values = ema.values()
    assert values["grad_sq"] == pytest.approx(delta_sq, rel=0.15)
    assert values["b_simple"] == pytest.approx(expected, rel=0.15)
    assert not values["b_simple"] == pytest.approx(d + 1, rel=0.15)  # the noise term matters here


def test_two_batch_estimates_are_exact_on_expected_norms():
    g2, trace = 2.0, 30.0
    small, big = g2 + trace / 4, g2 + trace / 32
    assert two_batch_estimates(small, big, 4, 32) == pytest.approx((g2, trace))
