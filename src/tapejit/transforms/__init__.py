"""The transforms layer: how a user's function and a call become a program, cached and run.

A transform (`grad`, `jit`, `vmap`, `jacfwd`, `vjp`, ... and `GradientTape`'s sweeps) is a
record, as an op is one:

- record.py: `Transform` (a name, how a call becomes a signature and a `CacheKey`, the
  record's trace and its tape transform, how outputs are finished, whether it takes the fast
  path or has a second program run on residuals) and what the cache keeps (`Specialization`);
- builder.py: the one program builder, trace -> dce -> re-roll -> tape transform -> optimize,
  reporting each stage (`tj.explain`);
- cached.py: the one per-signature cache that runs any record (`CachedTransform`, never
  subclassed), with its fast path; variants.py its programs chosen by guards; sharing.py the
  programs shared between transforms of one function; residuals.py a program's second half;
- arguments.py: a call's arguments (leaves, avals, names) and its `CacheKey`; traced.py: the
  function traced on them, the first half of the builder;
- first_call.py: the first-call tier (interpret the first calls, compile when it pays);
- outputs.py: output finishing; pickling.py: pickling for Dask.

Below: tracing (trace.py, draws.py: numpy random draws), autodiff and its derived tapes
(derived_tapes.py), the passes and compile.py. Above: the records of the public transforms
(api.py, jacobians.py, split.py, vmap.py, tape_sweeps.py) and explain.py. A new transform is
a Tape -> Tape function (derived_tapes.py) and a record.
"""
