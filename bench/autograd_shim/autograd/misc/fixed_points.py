"""autograd.misc.fixed_points.fixed_point as the plain loop: tapejit follows the `while` on
the traced distance (a guarded program) and differentiates through the iterations taken
(autograd instead iterates a reverse fixed point: the same derivative to the tolerance)."""


def fixed_point(f, a, x0, distance, tol):
    _f = f(a)
    x, x_prev = _f(x0), x0
    while distance(x, x_prev) > tol:
        x, x_prev = _f(x), x
    return x
