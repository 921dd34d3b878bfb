"""scipy.stats.multivariate_normal and scipy.stats.dirichlet on traced arrays: logpdf and pdf.

multivariate_normal: a covariance that is not traced (an array, a scalar or a vector of
variances, a scipy.stats.Covariance) is processed by scipy itself (its checks and errors,
allow_singular, the -inf outside a singular covariance's support) and only the quantiles and
the mean are traced; a traced covariance is factored by np.linalg.cholesky (one that is not
positive definite raises LinAlgError, as scipy's does; allow_singular=True is not supported
for it). dirichlet: scipy's layout (the components along x's first axis; k - 1 of them
completed by 1 - their sum); where scipy raises ValueError for a value (alpha <= 0, x outside
the simplex) the result is NaN. Both squeeze their result as scipy does.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ArgumentError, ShapeError, UnsupportedOperationError, at_source, user_source
from ..ops import special as S
from ..trace import Tracer
from . import asarray, cast
from .math import compute_dtype

sc = S.sc
LOG_2PI = math.log(2 * math.pi)


def _float(*xs: Any) -> np.dtype:
    """The arguments' common float dtype (float64 for integers), None ignored."""
    xs = tuple(x if isinstance(x, (Tracer, int, float)) else np.asarray(x)
               for x in xs if x is not None)
    dtype = compute_dtype(np.add, xs or (0.0,), common=True)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def _shape_error(message: str) -> ShapeError:
    return ShapeError(at_source(message, user_source()))


def _scipy_checks(check: Any, *args: Any) -> Any:
    """scipy's check of multivariate_normal's parameters; its ValueError (a shape, a cov that
    is not positive semidefinite) at the user's line (LinAlgError, for a singular constant
    cov, stays scipy's)."""
    try:
        return check(*args)
    except np.linalg.LinAlgError:
        raise
    except ValueError as e:
        raise ArgumentError(at_source(f"scipy.stats.multivariate_normal: {e}",
                                      user_source())) from None


def _quantiles(x: Any, dim: int, dtype: np.dtype) -> Any:
    """scipy's layout: a scalar is one point; a vector one point, or for dim 1 a column of
    points; otherwise the last axis holds the components."""
    x = cast(asarray(x), dtype)
    if x.ndim == 1:
        x = np.reshape(x, (-1, 1) if dim == 1 else (1, -1))
    elif x.ndim == 0:
        x = np.reshape(x, (1,))
    if x.shape[-1] != dim:
        raise _shape_error(f"scipy.stats.multivariate_normal: x has {x.shape[-1]} components "
                           f"(its last axis), the distribution has dimension {dim}")
    return x


def _traced_cov(dist: Any, mean: Any, cov: Any, dtype: np.dtype) -> tuple[int, Any, Any]:
    """(dim, mean, cov) as scipy completes them (scipy checks the shapes), cov traced."""
    def shaped(v: Any) -> Any:
        return None if v is None else np.zeros(np.shape(v))
    dim = _scipy_checks(dist._process_parameters_psd, None, shaped(mean), shaped(cov))[0]
    mean = np.zeros(dim, dtype) if mean is None else np.reshape(cast(asarray(mean), dtype),
                                                                (dim,))
    cov = cast(cov, dtype)
    if dim == 1 or cov.ndim == 2:
        cov = np.reshape(cov, (dim, dim))
    else:
        cov = cov * np.eye(dim, dtype=dtype) if cov.ndim == 0 else np.diag(cov)
    return dim, mean, cov


def _maha_cholesky(dev: Any, cov: Any) -> tuple[Any, Any]:
    """(|L^-1 dev|^2 over the last axis, log det cov), cov = L L^T."""
    chol = np.linalg.cholesky(cov)
    flat = np.reshape(dev, (-1, dev.shape[-1]))
    white = np.linalg.solve(chol, np.transpose(flat))
    maha = np.reshape(np.sum(white * white, axis=0), dev.shape[:-1])
    return maha, 2 * np.sum(np.log(np.diagonal(chol)))


def mvn_logpdf(dist: Any, x: Any, mean: Any = None, cov: Any = 1,
               allow_singular: bool = False) -> Any:
    """multivariate_normal.logpdf: -(rank log 2 pi + log pdet cov + |whitened x - mean|^2)/2."""
    dtype = _float(x, mean, cov if isinstance(cov, Tracer) else None)
    if isinstance(cov, Tracer):
        if allow_singular:
            raise UnsupportedOperationError(at_source(
                "scipy.stats.multivariate_normal: allow_singular=True is not supported with "
                "a traced cov (tapejit factors it by Cholesky); pass a constant cov, or leave "
                "allow_singular=False", user_source()))
        dim, mean, cov = _traced_cov(dist, mean, cov, dtype)
        dev = _quantiles(x, dim, dtype) - mean
        maha, log_det = _maha_cholesky(dev, cov)
        return np.squeeze(-0.5 * (dim * LOG_2PI + log_det + maha))
    shaped = mean if mean is None or not isinstance(mean, Tracer) else np.zeros(mean.shape)
    dim, fixed, cov_object = _scipy_checks(dist._process_parameters, shaped, cov,
                                           allow_singular)
    if isinstance(mean, Tracer):
        fixed = np.reshape(cast(mean, dtype), (dim,))
    dev = _quantiles(x, dim, dtype) - fixed
    white = cov_object._whiten(dev)
    out = -0.5 * (cov_object.rank * LOG_2PI + cov_object.log_pdet
                  + np.sum(white * white, axis=-1))
    if np.any(cov_object.rank < dim):           # a singular cov: -inf off its support
        out = np.where(cov_object._support_mask(dev), out, -math.inf)
    return np.squeeze(out)


def mvn_pdf(dist: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    return np.exp(mvn_logpdf(dist, x, *args, **kwargs))


def _simplex(x: Any, k: int, dtype: np.dtype) -> Any:
    """x with k components along its first axis (scipy's checks; k - 1 completed)."""
    x = cast(asarray(x), dtype)
    if x.ndim not in (1, 2) or x.shape[0] not in (k - 1, k):
        raise _shape_error(
            f"scipy.stats.dirichlet: x must have {k} or {k - 1} entries along its first axis "
            f"(one or two axes) for alpha of shape ({k},), got x.shape = {x.shape}")
    if x.shape[0] == k - 1:
        x = np.concatenate([x, 1 - np.sum(x, axis=0, keepdims=True)], axis=0)
    return x


def dirichlet_logpdf(dist: Any, x: Any, alpha: Any) -> Any:
    """dirichlet.logpdf: sum((alpha - 1) log x) - log B(alpha), NaN where scipy raises for a
    value."""
    if not isinstance(alpha, Tracer) and np.min(alpha) <= 0:
        raise ArgumentError(at_source(
            f"scipy.stats.dirichlet: all parameters must be greater than 0, got alpha = "
            f"{alpha!r}", user_source()))
    if np.ndim(alpha) != 1:
        raise _shape_error(f"scipy.stats.dirichlet: alpha must be one dimensional, got "
                           f"alpha.shape = {np.shape(alpha)}")
    dtype = _float(x, alpha)
    alpha = cast(asarray(alpha), dtype)
    x = _simplex(x, alpha.shape[0], dtype)
    column = np.reshape(alpha, (-1,) + (1,) * (x.ndim - 1))
    bad = np.any((x < 0) | (x > 1) | ((x == 0) & (column < 1)), axis=0)
    bad = bad | (np.abs(np.sum(x, axis=0) - 1) > 1e-9) | np.any(alpha <= 0)
    safe_alpha = np.where(alpha > 0, alpha, 1.0)
    safe_x = np.where(bad, 1 / alpha.shape[0], x)
    log_beta = np.sum(sc.gammaln(safe_alpha)) - sc.gammaln(np.sum(safe_alpha))
    column = np.reshape(safe_alpha, column.shape)
    out = np.sum(sc.xlogy(column - 1, safe_x), axis=0) - log_beta
    return np.squeeze(np.where(bad, math.nan, out))


def dirichlet_pdf(dist: Any, x: Any, alpha: Any) -> Any:
    return np.exp(dirichlet_logpdf(dist, x, alpha))
