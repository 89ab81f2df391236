"""Shared fixtures: one local Spark session for the whole run, and the RocketMQ 4.9.8 sample store."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

from storelib.broker.config import BrokerConfig, load_broker_config

if TYPE_CHECKING:
    from tests.broker.harness import BrokerStore

pytest.register_assert_rewrite("tests.reference")  # its assertions explain themselves like a test's
# A shared or loaded machine runs examples slowly: no per-example deadline, no too-slow health check (the examples
# and their assertions are the same; only the timing limits go).
settings.register_profile("loaded-machine", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("loaded-machine")


def _fixture_dir() -> Path:
    """``shared/fixtures/rocketmq-4.9.8-sample`` in the nearest directory above the checkout that has it
    (``../shared`` of the main checkout, ``../../shared`` of a worktree under ``wt/``)."""
    repo = Path(__file__).resolve().parents[1]
    candidates = [p / "shared" / "fixtures" / "rocketmq-4.9.8-sample" for p in repo.parents]
    return next((c for c in candidates if c.is_dir()), candidates[0])


FIXTURE_DIR = _fixture_dir()
EXPIRED, CLEAN, BROKER_CONF = FIXTURE_DIR / "expired", FIXTURE_DIR / "clean", FIXTURE_DIR / "broker.conf"
EXPIRED_SUMMARY = "rebuild: 16 segments, 6,900 messages, 25 queues, 5 index files"
needs_sample = pytest.mark.skipif(
    not BROKER_CONF.is_file(), reason="the RocketMQ 4.9.8 sample store is not under any parent's shared/fixtures"
)
V5_FIXTURE_NAME = "rocketmq-5.5.0-sample"


def find_shared(name: str) -> Path | None:
    """``shared/fixtures/<name>`` in the nearest parent directory that has it (main checkout or worktree)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "shared" / "fixtures" / name / "README.md").is_file():
            return parent / "shared" / "fixtures" / name
    return None


@pytest.fixture(scope="session", autouse=True)
def spark():
    """The worker's one Spark session, made before its first test: a verb run in-process reuses it (made later, it
    would reuse the verb's local[*] session instead)."""
    from jobs.runtime.session import spark_session

    session, _ = spark_session("rmqstore-tests", master="local[2]", overrides=["spark.sql.shuffle.partitions=4"])
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker_store() -> Callable[..., BrokerStore]:
    """A function (version, variant="default") -> the real broker's store (tests/broker/fixtures.py)."""
    from tests.broker.fixtures import broker_store_of, broker_stores

    return functools.partial(broker_store_of, broker_stores())


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    """The 4.9.8 sample store (see its README.md); tests that need it are skipped when it is absent."""
    if not (FIXTURE_DIR / "broker.conf").is_file():
        pytest.skip(f"RocketMQ 4.9.8 sample store not found at {FIXTURE_DIR}")
    return FIXTURE_DIR


@pytest.fixture(scope="session")
def fixture_cfg(fixture_dir: Path) -> BrokerConfig:
    """The sample store's broker.conf."""
    return load_broker_config(fixture_dir / "broker.conf")


@pytest.fixture(scope="session")
def crashed_rebuilt(spark, fixture_dir: Path, fixture_cfg: BrokerConfig, tmp_path_factory) -> Path:
    """crashed/ rebuilt once (audit and recover tests); its consumequeue/ and index/ equal clean/'s."""
    from jobs.pipeline.context import Run
    from jobs.pipeline.rebuild_flow import rebuild

    out = tmp_path_factory.mktemp("rebuilt") / "crashed"
    rebuild(Run(spark, fixture_cfg), str(fixture_dir / "crashed"), str(out), on_error="skip-segment")
    return out


@pytest.fixture(scope="session")
def v5_fixture() -> Path:
    """The 5.5.0 sample store (see its README.md); skipped when it is absent."""
    path = find_shared(V5_FIXTURE_NAME)
    if path is None:
        pytest.skip(f"the RocketMQ 5.5.0 sample store ({V5_FIXTURE_NAME}) is not under any parent's shared/fixtures")
    return path
