"""Test processes share the cores with the e2e launches: under pytest-xdist the fast tier runs at a
lower priority than the launches, and every test process runs one OpenMP thread (tests/conftest.py)."""

from __future__ import annotations

import os


def test_the_fast_tier_yields_to_the_launches_under_xdist(request):
    niced = getattr(request.config, "_arise_niced", False)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assert niced and os.getpriority(os.PRIO_PROCESS, 0) > 15  # below Ray's workers (conftest.FAST_TIER_NICENESS)
    else:  # a serial run keeps the priority it was started with
        assert not niced


def test_test_processes_run_one_openmp_thread():
    # tests/conftest.py sets it before torch loads (a user's own value is kept)
    import torch

    assert torch.get_num_threads() <= int(os.environ["OMP_NUM_THREADS"])
    assert os.environ["MKL_NUM_THREADS"]
