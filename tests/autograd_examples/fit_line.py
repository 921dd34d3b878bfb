"""A tiny program written the way HIPS autograd's examples are (for the runner's smoke test):
a line fitted by autograd's adam on minibatches sliced with the step number, with a
scipy.stats likelihood, a plot, and a callback."""
import matplotlib.pyplot as plt

import autograd.numpy as np
import autograd.numpy.random as npr
from autograd import grad
from autograd.misc.optimizers import adam
from autograd.scipy.stats import norm

rs = npr.RandomState(0)
inputs = rs.randn(40)
targets = 2.0 * inputs - 1.0 + 0.1 * rs.randn(40)
batch_size = 10


def objective(params, iter):
    start = (iter % 4) * batch_size                       # an int argument that slices
    x, y = inputs[start:start + batch_size], targets[start:start + batch_size]
    return -np.sum(norm.logpdf(y, params["w"] * x + params["b"], 0.5))


def callback(params, iter, g):
    if iter % 20 == 0:
        print(f"step {iter} objective {objective(params, iter)}")
        plt.plot(inputs, params["w"] * inputs + params["b"])


params = adam(grad(objective), {"w": 0.0, "b": 0.0}, step_size=0.1, num_iters=60,
              callback=callback)
print(f"w {params['w']:.3f} b {params['b']:.3f}")
