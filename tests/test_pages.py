"""pages.py: a program's large work arrays are mapped before its first call writes them."""
import mmap
import resource
import sys

import numpy as np
import pytest

from tapejit import pages


def _faults_writing(a: np.ndarray) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    a.fill(1.0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _fresh_mapping() -> np.ndarray:
    """1 MiB of new anonymous memory (too small for a huge page): 256 pages to map."""
    return np.frombuffer(mmap.mmap(-1, 1 << 20), np.float64)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise is Linux's")
def test_populated_arrays_take_no_page_faults_when_written():
    assert _faults_writing(_fresh_mapping()) >= 200     # the control: page by page
    mapped = _fresh_mapping()
    if not pages.populate([mapped]):
        pytest.skip("this kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")
    assert _faults_writing(mapped) < 10


def test_a_new_programs_workspace_is_prefaulted(monkeypatch):
    import tapejit as tj
    seen = []
    monkeypatch.setattr("tapejit.compile.prefault", lambda arrays: seen.extend(arrays))
    x = np.ones((300, 300))

    def f(a):
        return np.sum(np.exp(a) @ np.sin(a))

    tj.grad(f)(x)
    assert any(a.nbytes >= pages.LARGE for a in seen)
