"""autograd.scipy.signal.convolve (autograd's own N-d convolution with `axes` and
`dot_axes`), in plain numpy for what the examples use: mode "valid", the kernel the smaller
array along the convolved axes, flipped as a true convolution."""
import numpy as np


def convolve(A, B, axes=None, dot_axes=((), ()), mode="full"):
    """Output axes: A's free axes, B's free axes, then the convolved axes."""
    if mode != "valid" or axes is None:
        raise NotImplementedError("the shim's convolve does mode='valid' with axes only")
    if any(B.shape[b] > A.shape[a] for a, b in zip(*axes)):
        A, B, axes, dot_axes = B, A, axes[::-1], dot_axes[::-1]
        swap = True
    else:
        swap = False
    k_shape = [B.shape[b] for b in axes[1]]
    out_shape = [A.shape[a] - k + 1 for a, k in zip(axes[0], k_shape)]
    total = 0.0
    for offset in np.ndindex(*k_shape):
        a_index = [slice(None)] * A.ndim
        b_index = [slice(None)] * B.ndim
        for ax_a, ax_b, o, k, n in zip(axes[0], axes[1], offset, k_shape, out_shape):
            a_index[ax_a] = slice(o, o + n)
            b_index[ax_b] = k - 1 - o
        b_part = B[tuple(b_index)]
        b_dot = [d - sum(1 for c in axes[1] if c < d) for d in dot_axes[1]]
        total = total + np.tensordot(A[tuple(a_index)], b_part, (list(dot_axes[0]), b_dot))
    n_conv, a_free = len(axes[0]), A.ndim - len(axes[0]) - len(dot_axes[0])
    b_free = B.ndim - len(axes[1]) - len(dot_axes[1])
    # tensordot's result: A's remaining axes (free and convolved, in order), then B's free axes
    a_rest = [ax for ax in range(A.ndim) if ax not in dot_axes[0]]
    conv_pos = [a_rest.index(ax) for ax in axes[0]]
    free_a = [p for p in range(len(a_rest)) if p not in conv_pos]
    free_b = list(range(len(a_rest), len(a_rest) + b_free))
    first, second = (free_b, free_a) if swap else (free_a, free_b)
    assert len(free_a) == a_free and len(conv_pos) == n_conv
    return np.transpose(total, first + second + conv_pos)
