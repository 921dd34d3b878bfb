"""The llvm generator: the numba generator's module source (codegen/cpu.py) lowered to LLVM IR
and compiled with llvmlite in milliseconds; numba stays the second tier for what it does not
cover.

- lower.py: the generated source, parsed, as LLVM IR text defining `tj_entry(args, S)`
  (emit.py spells values and types, expr.py lowers expressions).
- library.py: the kernels that IR calls (vector math, special functions, matrix products),
  compiled once per machine and kept on disk as bitcode.
- jit.py: IR text -> optimised object code (kernels linked in) -> code loaded in the process;
  object code cached on disk per program.
- runtime.py: the call from Python into `tj_entry`, and the parallel loop runtime.
"""
