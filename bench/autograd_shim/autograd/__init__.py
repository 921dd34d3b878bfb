"""HIPS autograd's API on tapejit, for bench/autograd_examples.py (a bench-only shim, not a
part of tapejit): `autograd.numpy` is numpy, `autograd.scipy.*` scipy's modules, and the
differential operators are tapejit's transforms. Each gradient also records the objective
(record.py), as the runner's autograd side does."""
import functools
import sys
import weakref

import numpy
import numpy.linalg
import numpy.random

import shim_record as record
import tapejit as tj

sys.modules[__name__ + ".numpy"] = numpy
sys.modules[__name__ + ".numpy.random"] = numpy.random
sys.modules[__name__ + ".numpy.linalg"] = numpy.linalg
numpy = numpy


def _argnums(argnum):
    return tuple(argnum) if isinstance(argnum, (list, tuple)) else argnum


def _kept(transform):
    record.TRANSFORMS.append(transform)
    return transform


def _scalar(fun):
    """`fun` with its output reshaped to (): autograd differentiates outputs of size 1. One
    wrapper per function, so that `grad(f)` made again (in a loop) shares f's programs."""
    try:
        return _SCALARS[fun]
    except (KeyError, TypeError):
        pass

    @functools.wraps(fun)
    def scalar(*args, **kwargs):
        return numpy.reshape(fun(*args, **kwargs), ())
    try:
        _SCALARS[fun] = scalar
    except TypeError:       # not weakly referable
        pass
    return scalar


_SCALARS = weakref.WeakKeyDictionary()


def value_and_grad(fun, argnum=0):
    """autograd.value_and_grad: `(value, gradient)` of a function with one output value."""
    vg = _kept(tj.value_and_grad(_scalar(fun), argnums=_argnums(argnum)))

    def both(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        record.note(value)
        return value, g
    return both


def grad(fun, argnum=0):
    """autograd.grad: the gradient of a scalar function."""
    both = value_and_grad(fun, argnum)
    return lambda *args, **kwargs: both(*args, **kwargs)[1]


def elementwise_grad(fun, argnum=0):
    """autograd.elementwise_grad: the vector-Jacobian product with ones (the gradient of the
    sum of the outputs)."""
    gradient = _kept(tj.grad(lambda *args: numpy.sum(fun(*args)), argnums=_argnums(argnum)))
    return record._noting(gradient)


def hessian(fun, argnum=0):
    return _kept(tj.hessian(fun, argnums=_argnums(argnum)))


def jacobian(fun, argnum=0):
    return _kept(tj.jacobian(fun, argnums=_argnums(argnum)))


def hessian_vector_product(fun, argnum=0):
    """autograd.hessian_vector_product: `hvp(*args, vector)`, the Hessian of `fun` at args
    times `vector`."""
    fun_grad = tj.grad(_scalar(fun), argnums=argnum)

    def vec_prod(*args):
        *args, vector = args
        return numpy.tensordot(fun_grad(*args), vector, numpy.ndim(vector))
    return _kept(tj.grad(vec_prod, argnums=argnum))


def make_vjp(fun, argnum=0):
    """autograd.make_vjp: `(vjp, value)`."""
    def at(*args):
        def partial(x):
            return fun(*args[:argnum], x, *args[argnum + 1:])
        value, vjp = tj.vjp(partial, args[argnum])
        return (lambda g: vjp(g)[0]), value
    return at


