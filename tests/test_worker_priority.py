"""Under pytest-xdist the fast tier runs at a lower priority than the e2e launches (tests/conftest.py)."""

from __future__ import annotations

import os


def test_the_fast_tier_yields_to_the_launches_under_xdist(request):
    niced = getattr(request.config, "_arise_niced", False)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assert niced and os.getpriority(os.PRIO_PROCESS, 0) >= 10  # conftest.FAST_TIER_NICENESS
    else:  # a serial run keeps the priority it was started with
        assert not niced
