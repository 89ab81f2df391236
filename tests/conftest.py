"""Shared fixtures: one local Spark session for the whole run, and the RocketMQ 4.9.8 sample store."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURE_DIR = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "rocketmq-4.9.8-sample"


@pytest.fixture(scope="session")
def spark():
    from jobs.session import spark_session

    session, _ = spark_session("rmqstore-tests", master="local[2]", overrides=["spark.sql.shuffle.partitions=4"])
    yield session
    session.stop()
