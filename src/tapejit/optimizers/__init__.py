"""Optimizers, gradient transformations and learning-rate schedules over pytrees of arrays,
written in plain numpy, in optax's conventions (and Keras's, for `tj.Variable`s).

    opt = tj.optimizers.Adam(tj.optimizers.warmup(tj.optimizers.cosine_decay(1e-3, 900), 100))
    state = opt.init(params)                               # a dict pytree of arrays
    updates, state = opt.update(grads, state, params)      # optax: the updates to add
    params = tj.optimizers.apply_updates(params, updates)
    params, state = opt.step(grads, state, params)         # the same, in one call

    @tj.jit                                                # forward, reverse and update:
    def train_step(params, state, x, y):                   # one native call per step
        loss, grads = tj.value_and_grad(loss_fn)(params, x, y)
        params, state = opt.step(grads, state, params)
        return params, state, loss

    opt = tj.optimizers.chain(tj.optimizers.clip_by_global_norm(1.0),   # as optax.chain
                              tj.optimizers.scale_by_adam(),
                              tj.optimizers.scale_by_learning_rate(1e-3))
    opt.apply_gradients(zip(grads, variables))             # Keras: tj.Variables in place

Everything that changes at run time is a leaf of the state: the step count (which a schedule
reads), the hyperparameters (`state["hyper"]`, float64 0-d arrays: assign new values freely; a
schedule's numbers are there too, e.g. `state["hyper"]["learning_rate"]["steps"]`) and the
per-parameter slots (momentum, moments). So under `tj.jit` a schedule, a schedule of another
length or a new hyperparameter value never recompiles. What is fixed when the optimizer is made
is its structure: the kind of schedule, which terms exist, and weight decay's mask.

schedules.py: the schedules; gradient_transforms.py: the protocol, `chain` and the rules;
named.py: the named optimizers built from the rules; stateful.py: `apply_gradients` for
variables.
"""
from .named import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop
from .schedules import constant, cosine_decay, step_decay, warmup
from .gradient_transforms import (GradientTransformation, Transform, add_decayed_weights,
                                  apply_updates, chain, clip, clip_by_global_norm, global_norm,
                                  scale, scale_by_adam, scale_by_learning_rate, scale_by_rms,
                                  scale_by_rss, scale_by_schedule, trace)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "Adagrad",
           "GradientTransformation", "Transform", "chain", "apply_updates", "global_norm",
           "clip_by_global_norm", "clip", "scale", "scale_by_schedule", "scale_by_learning_rate",
           "scale_by_adam", "scale_by_rms", "scale_by_rss", "trace", "add_decayed_weights",
           "constant", "step_decay", "cosine_decay", "warmup"]
