"""autograd.misc.flatten: nested lists, tuples and dicts (keys sorted) of arrays and scalars
to one vector, and back. Plain numpy, so it can be traced (autograd's regularisers flatten the
parameters inside the objective)."""
import numpy as np


def flatten(value):
    """`(vector, unflatten)`."""
    leaves = []
    structure = _structure(value, leaves)
    flat = np.concatenate([np.ravel(x) for x in leaves]) if leaves else np.array([])
    return flat, lambda vector: _rebuild(structure, vector, [0])


def _structure(value, leaves):
    if type(value) in (list, tuple):
        return type(value), [_structure(v, leaves) for v in value]
    if type(value) is dict:
        return dict, [(k, _structure(value[k], leaves)) for k in sorted(value)]
    leaves.append(value)
    return None, np.shape(value)


def _rebuild(structure, vector, at):
    kind, inner = structure
    if kind in (list, tuple):
        return kind(_rebuild(s, vector, at) for s in inner)
    if kind is dict:
        return {k: _rebuild(s, vector, at) for k, s in inner}
    size = int(np.prod(inner))
    part = np.reshape(vector[at[0]:at[0] + size], inner)
    at[0] += size
    return part


def flatten_func(func, example):
    """`(flat_func, unflatten, flat_example)`: `func` taking and returning vectors."""
    flat_example, unflatten = flatten(example)
    return (lambda x, *args: flatten(func(unflatten(x), *args))[0]), unflatten, flat_example
