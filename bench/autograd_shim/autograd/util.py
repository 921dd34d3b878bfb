"""autograd.util.func: a function's underlying function (only rkhs uses it, with Box)."""


def func(f):
    return f
