"""Pytest fixtures for stores the real RocketMQ broker wrote (tests/broker/harness.py).

Use: `from tests.broker.fixtures import broker_store  # noqa: F401`, then in a test
`store = broker_store("5.5.0", "default")` -> BrokerStore (root, broker_conf, sent). Built once and cached on disk
(a first build takes about a minute); skipped when java, javac or mvn is missing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.broker.harness import BrokerStore, build_store, java_available


@pytest.fixture(scope="session")
def broker_store() -> Callable[..., BrokerStore]:
    """A function (version, variant="default") -> the real broker's store, built or taken from the cache."""
    reason = java_available()
    if reason:
        pytest.skip(f"real RocketMQ broker stores need java, javac and mvn ({reason})")
    built: dict[tuple[str, str], BrokerStore] = {}

    def get(version: str, variant: str = "default") -> BrokerStore:
        if (version, variant) not in built:
            built[version, variant] = build_store(version, variant)
        return built[version, variant]

    return get
