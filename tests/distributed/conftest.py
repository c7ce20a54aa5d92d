"""Fixtures of the distributed tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance (on 127.0.0.1: tests/conftest.py) for the tests of a module that drive
    Ray actors from this process. Per module, not per session: test_prepared_run.py starts its
    own (its workers must inherit the environment its fixture sets), and one process holds one."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
