"""The Spark session every job uses: master and settings from conf/<profile>.conf plus --conf overrides."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from jobs.jars import jar_defaults
from udfs.fs import spark_s3_settings

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def read_profile(profile: str) -> dict[str, str]:
    """A spark-defaults style file: ``key value`` per line, ``#`` comments."""
    path = CONF_DIR / f"{profile}.conf"
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            out[key] = value.strip()
    return out


def spark_session(app: str, master: str | None = None, profile: str = "local", overrides: list[str] | None = None):
    """Start (or reuse) a SparkSession; returns (session, start-up seconds)."""
    from pyspark.sql import SparkSession

    t0 = time.monotonic()
    # executors run the same interpreter as the driver, so storelib/udfs import the same way
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, 0.0
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in os.environ.get("SPARK_CONF", "") and not os.environ.get("SPARK_ENV_LOADED"):
        builder = builder.master("local[*]")
    settings = read_profile(profile)
    for item in overrides or []:
        key, _, value = item.partition("=")
        settings[key] = value
    # defaults where the user set nothing: Delta and S3A jars (unless the user chose jars), S3 from AWS_* variables
    settings = {**jar_defaults(settings), **spark_s3_settings(), **settings}
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, time.monotonic() - t0
