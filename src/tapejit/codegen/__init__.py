"""Backends' code generation from a fused tape (passes/fuse.py).

Shared: schedule.py (fused eqns -> Loop steps, other eqns -> Call steps), plan.py (where each
value lives, buffer reuse), views.py (layout ops as index maps), scalar.py (elementwise ops'
expressions and reductions' identities, from their op records), vmath.py (vectorisable math
kernels), writer.py (source writer, names, sizes, literals).
CPU: cpu.py (one numba njit module per program), calls.py (barriers: the `Kit` an op's
record writes its `cpu` code with), blas.py (matrix products). CUDA: cuda.py (module and
driver), cuda_base.py (the `Generator` an op's `cuda` code writes with), cuda_nest.py,
cuda_calls.py (combining kernels, barriers), cuda_math.py.
The backends read the op records; they never import each other's internals.
"""
