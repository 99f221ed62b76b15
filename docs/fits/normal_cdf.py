#!/usr/bin/env python3
"""Fits the polynomial of core/math.h's float32 normal CDF (normal_cdf_pdf_poly).

For a = |x|, Phi(-a) = R(a) exp(-a^2 / 2) with R(a) = erfcx(a / sqrt 2) / 2, and R is fitted as
t Q(t), t = 1 / (1 + b a), b = 1 / (2 sqrt 2), Q of degree 8, for the least largest relative
error over a in [0, 14]: a linear program over Chebyshev coefficients in 2t - 1 (well conditioned),
converted to powers of t at the end. Prints the coefficients of Q (t^8 first, as Horner's rule
reads them) and the fit's largest relative error; then, as a check, that error again with the
coefficients rounded to float32 and evaluated in double.

    pip install numpy scipy && python3 docs/fits/normal_cdf.py
"""
import numpy as np
from numpy.polynomial import chebyshev, polynomial
from scipy.optimize import linprog
from scipy.special import erfcx

B = 1.0 / (2.0 * np.sqrt(2.0))
DEGREE = 8
A_MAX = 14.0
POINTS = 6000


def fit():
    t_min = 1.0 / (1.0 + B * A_MAX)
    # Points clustered at the ends of [t_min, 1], where the error of a minimax fit peaks.
    t = t_min + (1.0 - t_min) * (1.0 - np.cos(np.linspace(0.0, np.pi, POINTS))) / 2.0
    a = (1.0 / t - 1.0) / B
    r = 0.5 * erfcx(a / np.sqrt(2.0))
    # Relative residual t Q(t) / R - 1, linear in Q's Chebyshev coefficients c.
    v = chebyshev.chebvander(2.0 * t - 1.0, DEGREE) * (t / r)[:, None]
    n = DEGREE + 1
    # Minimise e subject to |v c - 1| <= e at every point.
    objective = np.zeros(n + 1)
    objective[-1] = 1.0
    column = -np.ones((POINTS, 1))
    a_ub = np.vstack([np.hstack([v, column]), np.hstack([-v, column])])
    b_ub = np.concatenate([np.ones(POINTS), -np.ones(POINTS)])
    result = linprog(objective, A_ub=a_ub, b_ub=b_ub,
                     bounds=[(None, None)] * n + [(0.0, None)], method="highs")
    # Chebyshev in u = 2t - 1 -> powers of u -> powers of t.
    in_u = chebyshev.cheb2poly(result.x[:n])
    in_t = np.zeros(n)
    for k, c in enumerate(in_u):
        in_t[: k + 1] += c * polynomial.polypow([-1.0, 2.0], k)
    return in_t, result.x[-1], t, r


def main():
    q, error, t, r = fit()
    print(f"b = {B:.8f}, degree {DEGREE}, a in [0, {A_MAX}]: largest relative error {error:.3g}")
    for k in range(DEGREE, -1, -1):
        print(f"  t^{k}: {np.float32(q[k]):.8e}")
    rounded = q.astype(np.float32).astype(np.float64)
    got = t * polynomial.polyval(t, rounded)
    print(f"with float32 coefficients: largest relative error {np.max(np.abs(got / r - 1.0)):.3g}")


if __name__ == "__main__":
    main()
