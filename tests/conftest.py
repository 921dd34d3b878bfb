import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

# The suite checks the interpreter (ground truth) unless a test asks for the numba backend by
# name: compiling every small test program would cost seconds each.
os.environ.setdefault("TAPEJIT_BACKEND", "interpret")
