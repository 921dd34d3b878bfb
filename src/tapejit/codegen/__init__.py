"""Backends' code generation: schedule.py (fusion into loops and calls), writer.py (shared
source writer), scalar.py (elementwise templates), cpu.py (numba njit), calls.py (barriers)."""
