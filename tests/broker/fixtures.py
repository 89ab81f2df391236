"""Stores the real RocketMQ broker wrote (tests/broker/harness.py), for tests: built once and cached on disk (a
first build takes about a minute); the test is skipped, saying why, where java, javac or mvn is missing.

``harness_store(version, variant, seed)`` gives the store's directory; the ``broker_store`` fixture (conftest.py)
gives a function (version, variant="default") -> BrokerStore (root, broker_conf, sent).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.broker.harness import CORE_VERSIONS, SEED, BrokerStore, build_store, java_available


def _needs_java() -> None:
    reason = java_available()
    if reason:
        pytest.skip(f"real RocketMQ broker stores need java, javac and mvn ({reason})")


def harness_store(version: str, variant: str, seed: int = SEED) -> Path:
    """The real broker's store directory of that version, variant and workload seed."""
    _needs_java()
    return build_store(version, variant, seed).dir


def broker_stores() -> dict[tuple[str, str], BrokerStore]:
    """An empty memo for ``broker_store`` (skips first when the broker cannot run here)."""
    _needs_java()
    return {}


def broker_store_of(built: dict[tuple[str, str], BrokerStore], version: str, variant: str = "default") -> BrokerStore:
    """The store of (version, variant), built or taken from the cache, once per session."""
    if (version, variant) not in built:
        built[version, variant] = build_store(version, variant)
    return built[version, variant]


def release_param(version: str, *rest: object) -> object:
    """A pytest param of a release's real-broker case: marked ``broker``, and ``matrix`` (make test-matrix, not
    make test) unless the release is one of the core three."""
    marks = [pytest.mark.broker] + ([] if version in CORE_VERSIONS else [pytest.mark.matrix])
    return pytest.param(version, *rest, marks=marks, id="-".join(map(str, (version, *rest))))
