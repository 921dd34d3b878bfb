"""The disk cache: what tapejit keeps under TAPEJIT_CACHE_DIR so that a new process neither
traces, generates nor compiles again what an earlier one did (generated modules, their machine
code, the llvm generator's object code, build stages), all of it checked and sealed with the
user's key before it is loaded.

- store.py: the cache root and its sealed directories; generated modules published and
  loaded (`load_module`), listed and cleared.
- trust.py: what the cache trusts: directories only the user can write, files sealed with the
  user's key; every other module reads and writes the cache through it.
- numba_files.py: where numba keeps the machine code of generated modules, and its checked
  files (imports numba: loaded with the first program).
- memo.py: build stages (a tape's optimized program, its generated module) remembered across
  processes by a digest of all they were made from.

The threat model is docs/sharp-bits.md's "What the disk cache trusts".
"""
