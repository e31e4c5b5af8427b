"""Scaling-law fits as small pure functions: a power law ``loss = coefficient · x^(-exponent)`` fitted by least
squares in log-log space, with a 95% interval on the exponent, and the compute frontier it is fitted on.

A pure power law, not ``a · x^(-b) + c``: with the 3-9 points a sweep on a small machine gives, the irreducible
term ``c`` is not identified (any ``c`` below the smallest loss fits about as well), so the exponent read here is
the local slope over the swept range. ``fit_power_law_reference`` is the readable per-point version the tests
compare with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Student's t at 0.975 for 1..30 degrees of freedom (standard tables); beyond 30, 1.96 + 2.5 / df is within 0.002
# of the table at 40, 60 and 120 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_975(df: int) -> float:
    """The two-sided 95% quantile of Student's t with ``df`` degrees of freedom (NaN below 1)."""
    if df < 1:
        return float("nan")
    return _T975[df - 1] if df <= len(_T975) else 1.96 + 2.5 / df


@dataclass(frozen=True)
class PowerLaw:
    """``y = coefficient · x^(-exponent)``, fitted on ``points`` points.

    Attributes:
        coefficient: the value at x = 1.
        exponent: how fast y falls with x (positive: y falls).
        exponent_low: the 95% interval's low end (NaN with fewer than 3 points).
        exponent_high: the 95% interval's high end.
        points: how many (x, y) pairs the fit used.
        r2: the fit's R² in log-log space.
    """

    coefficient: float
    exponent: float
    exponent_low: float
    exponent_high: float
    points: int
    r2: float

    def __call__(self, x):
        return self.coefficient * np.asarray(x, dtype=float) ** -self.exponent


def fit_power_law(x, y) -> PowerLaw:
    """Least squares of log y on log x; the exponent's interval from the slope's standard error and Student's t
    (n - 2 degrees of freedom). x and y positive, at least 2 distinct x."""
    lx, ly = np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float))
    if len(lx) != len(ly) or len(np.unique(lx)) < 2:
        raise ValueError(f"a power law needs at least 2 distinct x values, got {len(np.unique(lx))}")
    mx, my = lx.mean(), ly.mean()
    sxx = float(((lx - mx) ** 2).sum())
    slope = float(((lx - mx) * (ly - my)).sum() / sxx)
    intercept = my - slope * mx
    residual = ly - (intercept + slope * lx)
    ss_res, ss_tot = float((residual ** 2).sum()), float(((ly - my) ** 2).sum())
    n = len(lx)
    half = t_975(n - 2) * math.sqrt(ss_res / (n - 2) / sxx) if n > 2 else float("nan")
    return PowerLaw(coefficient=math.exp(intercept), exponent=-slope, exponent_low=-slope - half,
                    exponent_high=-slope + half, points=n, r2=1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0)


def fit_power_law_reference(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """(coefficient, exponent, interval half-width) of ``fit_power_law``, one point at a time in plain floats."""
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    n = len(lx)
    mx, my = sum(lx) / n, sum(ly) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
    sxx = sum((a - mx) ** 2 for a in lx)
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_res = sum((b - intercept - slope * a) ** 2 for a, b in zip(lx, ly, strict=True))
    half = t_975(n - 2) * math.sqrt(ss_res / (n - 2) / sxx) if n > 2 else float("nan")
    return math.exp(intercept), -slope, half


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The compute frontier of (compute, loss) points: each point whose loss is below that of every point with
    less or equal compute, by compute (the best loss any run reached for its budget)."""
    best, out = math.inf, []
    for compute, loss in sorted(points, key=lambda p: (p[0], p[1])):
        if loss < best:
            out.append((compute, loss))
            best = loss
    return out
