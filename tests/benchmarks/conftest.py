"""Every benchmark run says first which CPU measured it (its figures mean nothing without it)."""

import pytest

from tests.benchmarks.cpu import cpu_line


@pytest.fixture(scope="session", autouse=True)
def _cpu_line():
    print(f"\n{cpu_line()}")
