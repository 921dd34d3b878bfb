import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# The suite checks the interpreter (ground truth) unless a test asks for the numba backend by
# name: compiling every small test program would cost seconds each.
os.environ.setdefault("TAPEJIT_BACKEND", "interpret")
# ... and a test that asks for numba checks compiled code from the first call on: by default a
# new program's first call runs on the interpreter (tests/test_first_call.py checks that).
os.environ.setdefault("TAPEJIT_FIRST_CALL", "compile")
