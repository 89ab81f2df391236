"""The Spark session every job uses: its settings in layers, and a quiet console.

Settings, each layer winning over the ones before it: built-in ``DEFAULTS`` < ``conf/<profile>.conf`` <
what the driver was given before our code ran (spark-submit's ``--conf``, ``--properties-file``,
spark-defaults.conf) < our own command line (``--master``, ``--conf``). A profile only fills keys nobody set.

Console: unless ``spark.rmqstore.verbose`` is true (``--verbose``) or the user has a log4j configuration of
their own, driver and executors log with ``conf/log4j2.properties`` (errors, lost tasks) and the JVM's
incubator-module notice is dropped, so a run prints our progress and summary, not Spark's start-up warnings.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.runtime.cds_archive import archive_option
from jobs.runtime.jars import ALL_JARS, JarNeeds, jar_defaults
from storelib.broker.config import parse_properties
from storelib.errors import ConfigError
from udfs.fs import spark_s3_settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
LOG4J_CONFIG = CONF_DIR / "log4j2.properties"
VERBOSE = "spark.rmqstore.verbose"
DEFAULTS: dict[str, str] = {"spark.master": "local[*]"}  # the layer under every profile
JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
SPARK_DEFAULT_LOG4J = "org/apache/spark/log4j2-defaults.properties"
JVM_NOISE = (b"WARNING: Using incubator modules:",)  # printed by the JVM itself, before log4j exists
#: a local master this process starts (not spark-submit's, whose workers may get udfs only from --py-files, after
#: the daemon starts; nor a cluster's): the workers are this interpreter, so their daemon can be ours
#: (udfs/daemon.py: no archives re-read at every task, the kernel loaded before the fork). Spark keeps one daemon per
#: worker environment, and its SQL runners add SPARK_SIMPLIFIED_TRACEBACK=1 to theirs: given to every worker, the
#: RDD jobs (the warm-up's, the audit's per-file tasks) and the Arrow ones share one daemon, started once, not a
#: second one, loading the kernel again, when the parse begins
LOCAL_DAEMON = {"spark.python.daemon.module": "udfs.daemon", "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK": "1"}
#: the same local master: the JVM only moves Arrow batches and shuffle blocks for a short run, and C2's compiling
#: costs more than it saves (make bench measures it). C1 alone shrinks the
#: code cache to 48 MB, which a long session (the test suite: ~250 queries) fills: the JVM then dies, so the
#: cache keeps the tiered default's size. Left out when the user's options set either.
LOCAL_JVM_OPTION = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def read_properties(path: Path) -> dict[str, str]:
    """A spark-defaults style file as Spark reads it (``Utils.getPropertiesFromFile``): Java ``Properties.load``
    over UTF-8 text (storelib.broker.config.parse_properties), values trimmed."""
    props = parse_properties(path.read_text(encoding="utf-8"), str(path))
    return {k: v.strip() for k, v in props.items()}


def read_profile(profile: str) -> dict[str, str]:
    """``conf/<profile>.conf``."""
    return read_properties(CONF_DIR / f"{profile}.conf")


def parse_overrides(items: list[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` items as a dict; a missing ``=`` is a settings error (exit code 2)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--conf {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def under_spark_submit() -> bool:
    """spark-submit started this Python driver from its own JVM (it hands over the gateway's port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_conf_dir() -> Path:
    """Where spark-submit looks for spark-defaults.conf and log4j2.properties."""
    if os.environ.get("SPARK_CONF_DIR"):
        return Path(os.environ["SPARK_CONF_DIR"])
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"]) / "conf"
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "conf"


def submitted_settings() -> dict[str, str]:
    """What the driver got before our code: the spark-submit JVM's settings, else SPARK_CONF_DIR's defaults."""
    if under_spark_submit():
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()  # connects to spark-submit's JVM, which holds the settings
        return dict(SparkConf(loadDefaults=True).getAll())
    path = spark_conf_dir() / "spark-defaults.conf"
    return read_properties(path) if path.is_file() else {}


def layered_settings(profile: str, submitted: dict[str, str], command_line: dict[str, str]) -> dict[str, str]:
    """DEFAULTS < conf/<profile>.conf < submitted < command line."""
    return {**DEFAULTS, **read_profile(profile), **submitted, **command_line}


def has_own_log4j(settings: dict[str, str]) -> bool:
    """The user chose a log4j configuration (JVM option, environment, or log4j2 file in SPARK_CONF_DIR)."""
    if any("log4j" in settings.get(key, "") for key in JAVA_OPTIONS):
        return True
    if os.environ.get("LOG4J_CONFIGURATION_FILE") or "log4j" in os.environ.get("SPARK_SUBMIT_OPTS", ""):
        return True
    return any((spark_conf_dir() / name).is_file() for name in ("log4j2.properties", "log4j2.xml"))


def local_jvm_options(settings: dict[str, str]) -> dict[str, str]:
    """The driver JVM's options with LOCAL_JVM_OPTION added unless the user's set a compiler level or code cache,
    and the class-data archive (jobs/runtime/cds_archive.py) when there is one and the user's choose nothing about class
    sharing."""
    key = "spark.driver.extraJavaOptions"
    current = settings.get(key, "")
    compiler = "TieredStopAtLevel" in current or "ReservedCodeCacheSize" in current
    added = [option for option in ("" if compiler else LOCAL_JVM_OPTION, archive_option(current)) if option]
    return {key: " ".join([current, *added]).strip()} if added else {}


def quiet_console(settings: dict[str, str]) -> dict[str, str]:
    """The JVM options that make driver and executors log with conf/log4j2.properties."""
    option = f"-Dlog4j.configurationFile={LOG4J_CONFIG.as_uri()}"
    return {key: f"{settings.get(key, '')} {option}".strip() for key in JAVA_OPTIONS}


def _forward_stderr(stream: Any) -> None:
    """Copy the JVM's stderr to file descriptor 2 (where it would have gone), leaving out the JVM's own notices."""
    with os.fdopen(os.dup(2), "wb") as out:
        for line in iter(stream.readline, b""):
            if not line.startswith(JVM_NOISE):
                out.write(line)
                out.flush()


def _launch_quiet_gateway(settings: dict[str, str]) -> None:
    """Start the driver JVM (as pyspark would, with ``settings``) with its stderr filtered by a thread."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(list(settings.items())), {"stderr": subprocess.PIPE})
    threading.Thread(target=_forward_stderr, args=(gateway.proc.stderr,), daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway)


def _quiet_running_driver() -> None:
    """Under spark-submit the driver JVM already runs: switch it to our log4j file if it uses Spark's defaults."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None  # spark-submit started the driver JVM
    context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
    location = context.getConfiguration().getConfigurationSource().getLocation()
    if location is None or location.endswith(SPARK_DEFAULT_LOG4J):
        # Spark remembers that it loaded its defaults and would load them again when the SparkContext starts
        spark_logging = getattr(jvm.org.apache.spark.internal, "Logging$").__getattr__("MODULE$")
        getattr(spark_logging, "org$apache$spark$internal$Logging$$defaultSparkLog4jConfig_$eq")(False)
        context.setConfigLocation(jvm.java.net.URI(LOG4J_CONFIG.as_uri()))


def spark_session(
    app: str,
    master: str | None = None,
    profile: str = "local",
    overrides: list[str] | None = None,
    needs: JarNeeds = ALL_JARS,
) -> tuple[SparkSession, float]:
    """Start (or reuse) a SparkSession with the layered settings and the jars ``needs`` asks for; returns
    (session, start-up seconds)."""
    return session_start(app, master, profile, overrides, needs)()


def session_start(
    app: str,
    master: str | None = None,
    profile: str = "local",
    overrides: list[str] | None = None,
    needs: JarNeeds = ALL_JARS,
) -> Callable[[], tuple[SparkSession, float]]:
    """The settings checked now (a bad ``--conf`` is a ConfigError here), the session started by the returned
    function: ``spark_session``, or a thread of its own while the verb reads the store (``start_in_background``)."""
    command_line = parse_overrides(overrides or []) | ({"spark.master": master} if master else {})
    active = _active_session()
    if active is not None:
        return lambda: (active, 0.0)
    return functools.partial(_start, app, profile, command_line, needs)


def _active_session() -> SparkSession | None:
    """This thread's active SparkSession; None, without importing pyspark, when nothing imported it yet."""
    if "pyspark.sql" not in sys.modules:
        return None
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def start_in_background(
    start: Callable[[], tuple[SparkSession, float]],
) -> concurrent.futures.Future[tuple[SparkSession, float]]:
    """``start()`` on a daemon thread (an exit before the session is needed does not wait for the JVM); the future
    of its (session, start-up seconds). The session is made active on the thread that takes it (``activate``)."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(start())
        except BaseException as exc:  # handed to the thread that waits for the session
            future.set_exception(exc)

    threading.Thread(target=run, name="spark-session", daemon=True).start()
    return future


def _import_converters() -> None:
    """pyspark's py4j argument converters import ``pyspark.testing.utils`` (and so pandas) at the first call
    into the JVM; imported on a thread of its own while a new session's JVM starts, it is not waited for after it.
    The session's thread holds no import lock when it calls into the JVM, so it only waits for this import; any
    failure here is left for that first call to meet again."""
    with contextlib.suppress(Exception):
        import pyspark.testing.utils  # noqa: F401


def activate(spark: SparkSession) -> None:
    """Make ``spark`` the active session of the calling thread: the JVM keeps one per thread, so a session started
    on another thread is not ``SparkSession.getActiveSession()`` here until this."""
    type(spark)._get_j_spark_session_class(spark._jvm).setActiveSession(spark._jsparkSession)


def _start(app: str, profile: str, command_line: dict[str, str], needs: JarNeeds) -> tuple[SparkSession, float]:
    """A new session: the settings' layers, our defaults where they leave a key unset, a quiet console."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    t0 = time.monotonic()
    threading.Thread(target=_import_converters, daemon=True).start()
    # executors run the same interpreter as the driver, so storelib/udfs import the same way
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = submitted_settings()
    settings = layered_settings(profile, submitted, command_line)
    # defaults where the user set nothing: the jars the run needs (unless the user chose jars), S3 from AWS_*
    # variables, and on a local master of our own JVM (under spark-submit it already runs) our worker daemon and JVM
    # options
    ours = settings.get("spark.master", "").startswith("local") and not under_spark_submit()
    settings = {**jar_defaults(settings, needs), **spark_s3_settings(), **(LOCAL_DAEMON if ours else {}), **settings}
    if ours:
        settings |= local_jvm_options(settings)
    quiet = settings.get(VERBOSE, "false").lower() != "true" and not has_own_log4j(settings)
    if quiet:
        settings |= quiet_console(settings)
        if under_spark_submit():
            _quiet_running_driver()
        elif SparkContext._gateway is None:
            _launch_quiet_gateway(settings)
    ours_only = {"spark.app.name": app} | {k: v for k, v in settings.items() if submitted.get(k) != v}
    # the SparkContext first, then the SQL session on it (builder.getOrCreate takes the running context): the
    # executors' Python workers start while the JVM makes the session and the first query is planned
    sc = SparkContext.getOrCreate(SparkConf().setAll(list(ours_only.items())))
    if quiet:
        sc.setLogLevel("ERROR")
    threading.Thread(target=_warm_python_workers, args=(sc,), daemon=True).start()
    builder = SparkSession.builder
    for key, value in ours_only.items():
        builder = builder.config(key, value)
    return builder.getOrCreate(), time.monotonic() - t0


def _warm_python_workers(sc: Any) -> None:
    """A one-task Python job: the executor's Python worker daemon starts (and, locally, loads the kernel:
    udfs.daemon) while the driver makes the SQL session and plans the first query, not after it."""
    with contextlib.suppress(Exception):  # a session stopped meanwhile; a broken worker fails the real job too
        sc.parallelize([0], 1).foreach(_nothing)


def _nothing(_: object) -> None:
    pass
