"""Backends' code generation from a fused tape (passes/fuse.py).

Shared: schedule.py (fused eqns -> Loop steps, other eqns -> Call steps), plan.py (where each
value lives, buffer reuse), views.py (layout ops as index maps), scalar.py (elementwise ops'
expressions, from their op records), vmath.py (vectorisable math kernels), writer.py (source writer, sizes, literals).
CPU: cpu.py (one numba njit module per program), calls.py (barrier ops), control.py (loops and
branches). CUDA: cuda.py (module and driver), cuda_base.py, cuda_nest.py, cuda_calls.py,
cuda_math.py.
"""
