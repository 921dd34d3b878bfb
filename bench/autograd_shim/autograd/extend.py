"""autograd.extend's `primitive` and `defvjp` as tapejit's `custom_vjp`. `Box` and `VSpace`
(autograd's own tracing classes) have no tapejit equivalent: importing them fails."""
import tapejit as tj


def primitive(fun):
    """A function whose derivative `defvjp` gives."""
    return tj.custom_vjp(fun)


def defvjp(prim, *makers):
    """`makers[i](ans, *args)` returns `g -> the cotangent of argument i` (None: no gradient)."""
    def fwd(*args):
        ans = prim.fn(*args)
        return ans, (ans, args)

    def bwd(residuals, g):
        ans, args = residuals
        return tuple(maker(ans, *args)(g) if maker is not None else None
                     for maker, _ in zip(list(makers) + [None] * len(args), args))
    prim.defvjp(fwd, bwd)
