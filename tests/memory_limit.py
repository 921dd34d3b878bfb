"""Programs that run out of memory, in a process whose address space is limited (RLIMIT_AS):
each must raise tj.OutOfMemoryError (a MemoryError naming the op and line) on its first and
a later call, never crash, and compute right afterwards. tests/test_out_of_memory.py runs it
in a subprocess; by hand:

    TAPEJIT_FIRST_CALL=compile MALLOC_ARENA_MAX=1 MALLOC_MMAP_THRESHOLD_=131072 \
        python tests/memory_limit.py

(glibc's malloc then maps every block of 128 KiB or more, and threads share its one heap, so
the limit holds for every block: by default a freed block raises that threshold, and a
thread's heap reserves 64 MiB of address space, which a block too large to map then comes
from.)

Each program compiles on small inputs first (LLVM needs memory to compile), then runs on
inputs whose arrays do not fit in what the limit leaves. Prints one line per case and
`memory driver: N cases raised, M did not`; exits 1 if a case did not raise as it must.
"""
from __future__ import annotations

import resource
import sys

import numpy as np

import tapejit as tj
from tapejit.codegen.llvm import runtime

MiB = 1 << 20


def loop_body(x, y):
    """An array made in each step of a loop: allocated by the compiled code."""
    return tj.fori_loop(0, 3, lambda i, c: c + np.sort(np.outer(x * i, y), axis=0)[0, 0], 0.0)


def output(x, y):
    """An output array: allocated by the caller before the compiled code runs."""
    return np.outer(x, y) * 2.0


def pair_sums(x, y):
    """A parallel loop over x's rows, each chunk allocating a row of len(y) (a vector loop
    over y's rows, between the sum over 3 coordinates and the exp)."""
    d = np.sum((x[:, None, :] - y[None, :, :]) ** 2, axis=-1)
    return np.sum(np.exp(-d) * d, axis=1)


def too_large(a):
    """A step's array of len(a)**3 elements: 2**66, more than 64 bits count in bytes."""
    return tj.fori_loop(0, 2, lambda i, c: c + np.sort(
        np.broadcast_to(a + i, (len(a),) * 3), axis=0)[0, 0, 0], 0.0)


def _mapped() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * resource.getpagesize()


def _limited(spare, fn, args):
    """`fn(*args)` with the address space limited to what is mapped now and `spare` bytes,
    the compiled code's allocator holding no memory of an earlier call."""
    runtime.release_memory()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_mapped() + spare, hard))
    try:
        return fn(*args)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def cases():
    """(name, program, small arguments, arguments too large, the memory the limit leaves
    (None: no limit), whether the large arguments' program runs once unlimited first, what
    the error must name)."""
    small = (np.linspace(0.0, 1.0, 20), np.linspace(1.0, 2.0, 20))
    large = (np.linspace(0.0, 1.0, 16384), np.linspace(1.0, 2.0, 16384))   # 2 GiB products
    # its first call compiles: LLVM needs memory for that, threads for their stacks
    yield "loop_body", loop_body, small, large, 512 * MiB, False, "mul at "
    yield "output", output, small, large, 512 * MiB, False, "mul at "
    points = np.linspace(0.0, 1.0, 192).reshape(64, 3)
    few, many = (points, points[:40]), (points, np.linspace(0.0, 1.0, 3 << 20).reshape(-1, 3))
    yield "pair_sums", pair_sums, few, many, 4 * MiB, True, None      # rows of 8 MiB
    yield "too_large", too_large, (np.ones(20),), (np.ones(1 << 22),), None, False, "8 EiB"


def main() -> int:
    raised = failed = 0
    for name, fn, small, large, spare, warm, named in cases():
        for backend in ("compiled", "interpret"):
            if backend == "interpret" and spare is None:
                continue          # numpy fails at the first of its 2**44-element arrays
            program = tj.jit(fn) if backend == "compiled" else tj.jit(fn, backend="interpret")
            want = fn(*small)
            if warm:
                program(*large)
            problems, text = [], ""
            for call in range(2):
                np.testing.assert_allclose(program(*small), want, rtol=1e-12)
                try:
                    program(*large) if spare is None else _limited(spare, program, large)
                    problems.append(f"call {call + 1} returned")
                except tj.OutOfMemoryError as err:
                    text = str(err)
                    if not isinstance(err, MemoryError) or (named and named not in text):
                        problems.append(f"call {call + 1}: {text}")
            np.testing.assert_allclose(program(*small), want, rtol=1e-12)
            print(f"{'FAIL' if problems else 'ok'} {name} ({backend}): "
                  f"{'; '.join(problems) or text}")
            failed, raised = failed + bool(problems), raised + (not problems)
    print(f"memory driver: {raised} cases raised, {failed} did not")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
