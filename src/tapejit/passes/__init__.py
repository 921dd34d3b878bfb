"""Tape -> Tape passes. Each is a pure function; the compiler's PIPELINE lists them in order."""
from .dce import dce

__all__ = ["dce"]
