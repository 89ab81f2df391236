"""The small context every pipeline stage takes (the Spark session, the broker's settings, where to work), and what
an audit stage hands back."""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import functools
import importlib.metadata
import posixpath
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from storelib.broker.config import BrokerConfig
from storelib.broker.rule_choice import BrokerRules
from storelib.findings import Finding
from storelib.reports.plan import Step
from udfs.fs import resolve

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def tool_version() -> str:
    """This toolkit's version, as installed (pyproject.toml's ``version``)."""
    try:
        return importlib.metadata.version("rmq-store-rebuild")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class SparkStart:
    """A run's SparkSession: given, or the future of (session, start-up seconds) of one still starting
    (jobs.cli.spark_run), waited for when first needed; one for a Run and every Run made from it."""

    def __init__(self, session: SparkSession | concurrent.futures.Future[tuple[SparkSession, float]]) -> None:
        self._session = session
        self.startup = 0.0  # seconds Spark took to start
        self.waited = 0.0  # of which the run waited for it, having nothing else to do

    def session(self) -> SparkSession:
        """The SparkSession, waited for when it is still starting, then active on this thread."""
        if isinstance(self._session, concurrent.futures.Future):
            from jobs.runtime.session import activate

            t0 = time.monotonic()
            self._session, self.startup = self._session.result()
            self.waited = time.monotonic() - t0
            activate(self._session)
        return self._session


@dataclasses.dataclass(frozen=True)
class Run:
    """One verb's run: ``work_root`` is the user's ``--work-dir`` (else work happens beside the output). The
    broker's settings and rules of a store are settled by jobs.pipeline.store_rules, which returns them in a new Run
    (``with_rules``)."""

    #: the SparkSession, or the future of one still starting (``SparkStart``, which holds it after): what a verb
    #: does before it first needs ``spark`` happens while the JVM starts
    session: SparkSession | concurrent.futures.Future[tuple[SparkSession, float]] | SparkStart
    cfg: BrokerConfig
    progress: bool = False
    work_root: str | None = None
    #: the broker rules resolved for each store this run reads (jobs.pipeline.store_rules.store_rules)
    broker_rules: Mapping[str, BrokerRules] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.session, SparkStart):
            object.__setattr__(self, "session", SparkStart(self.session))

    @property
    def _start(self) -> SparkStart:
        assert isinstance(self.session, SparkStart)  # __post_init__
        return self.session

    @property
    def spark(self) -> SparkSession:
        """The SparkSession, waited for when it is still starting, then active on this thread."""
        return self._start.session()

    @property
    def startup(self) -> float:
        """Seconds Spark took to start."""
        return self._start.startup

    @property
    def waited(self) -> float:
        """Seconds of ``startup`` the run waited for Spark, having nothing else to do."""
        return self._start.waited

    def with_rules(self, store: str, rules: BrokerRules, cfg: BrokerConfig | None = None) -> Run:
        """This run with ``store``'s rules (and the settings that hold them, when given)."""
        return dataclasses.replace(
            self, cfg=self.cfg if cfg is None else cfg, broker_rules={**self.broker_rules, store: rules}
        )

    @functools.cached_property
    def slots(self) -> int:
        """The tasks the executors run at once (jobs.pipeline.tasks.task_slots)."""
        from jobs.pipeline.tasks import task_slots

        return task_slots(self.spark.sparkContext)

    @contextlib.contextmanager
    def work_dir(self, beside: str, same_filesystem: bool = False) -> Iterator[str]:
        """A new directory for what executors write and later stages read, on a filesystem every executor
        sees: under ``--work-dir``, else next to ``beside`` (the output); always next to it with
        ``same_filesystem`` (staging that is published by rename). Removed afterwards, even on failure."""
        parent = None if same_filesystem else self.work_root
        parent = parent or posixpath.dirname(beside.rstrip("/")) or "."
        uri = f"{parent.rstrip('/')}/.rmqstore-work-{uuid.uuid4().hex[:12]}"
        fs, path = resolve(uri)
        fs.create_dir(path, recursive=True)
        try:
            yield uri
        finally:
            if fs.get_file_info(path).type == pafs.FileType.Directory:
                fs.delete_dir(path)


@dataclasses.dataclass(frozen=True)
class Found:
    """What stages of the audit found: findings, what ``rmqstore recover`` would change for them (file by file),
    and what a ``--since-last`` run left out (report.json's ``run.scope.skipped``)."""

    findings: tuple[Finding, ...] = ()
    repairs: tuple[Step, ...] = ()
    skipped: tuple[str, ...] = ()

    def __add__(self, other: Found) -> Found:
        return Found(self.findings + other.findings, self.repairs + other.repairs, self.skipped + other.skipped)


def numbered_tasks(run: Run, n: int) -> DataFrame:
    """Tasks 0 … n-1, one per partition, as a DataFrame of ``id`` made on the JVM (``spark.range``): what each task
    does travels in the function's closure, so no Python worker runs to hand the tasks their input."""
    return run.spark.range(0, n, 1, n)


def spark_schema(arrow_schema: pa.Schema) -> StructType:
    """The Spark schema of an Arrow schema (udfs.schema)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)
