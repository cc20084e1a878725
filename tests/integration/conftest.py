"""Fixtures the Kubernetes tests share: a client of the module's own fake API server.

Each module defines its ``fake`` fixture (the server, seeded as that module needs); ``api`` is a
``kubernetes`` client pointed at it.
"""

import kubernetes
import pytest


@pytest.fixture
def api(fake):
    configuration = kubernetes.client.Configuration()
    configuration.host = fake.url
    with kubernetes.client.ApiClient(configuration) as client:
        yield client
