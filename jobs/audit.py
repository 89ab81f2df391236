"""``rmqstore audit``: compare a live store with the index rebuilt from its commitlog, in Spark.

1. the rebuilt index: ``--rebuilt OUT`` (its rebuild.json, and the commitlog parsed again) or
   a rebuild into a temporary directory;
2. ConsumeQueue: one task per queue reads the live and rebuilt files and classifies the queue
   (storelib.audit.classify_queue);
3. IndexFile: one task per file position (live vs rebuilt, header checks); the live entries
   joined with the records (does each entry point at a record with its keyHash?); every key
   of every indexed message looked up with the broker's lookup (sampled above ``--index-sample``);
4. CommitLog: the rebuild's scan findings plus what the broker's recovery would do;
5. report.json (schema ``rmqstore-audit/1``, see README), report.html, a console summary;
6. with ``--history TABLE``: the findings and a summary row appended to the audit history (jobs.history).

``--since-last`` audits only the tail: the segments from the one holding the commitlog max offset of the
store's last clean run in the history table, the queues their messages touch, the IndexFiles covering them.

Exit codes: 0 clean (info findings only), 1 divergences found, 2 could not audit.
Nothing is ever written into the live store.
"""

from __future__ import annotations

if __package__ in (None, ""):
    import _bootstrap  # noqa: F401

import argparse
import collections
import dataclasses
import datetime as dt
import json
import posixpath
import shutil
import sys
import tempfile
import time
from typing import Any

import pyarrow.fs as pafs

from jobs.liveness import lock_held
from storelib.audit import (
    KINDS,
    SegmentFacts,
    check_commitlog,
    finding,
    index_file_name_after,
    is_divergence,
)
from storelib.checkpoint import Checkpoint
from storelib.config import BrokerConfig
from storelib.constants import INDEX_ENTRY_SIZE, INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE, SCHEDULE_TOPIC
from storelib.consumequeue import is_valid_topic
from storelib.dispatch import index_keys
from storelib.findings import SEVERITIES, Finding
from udfs.audit import (
    INDEX_ENTRY_SCHEMA,
    MISSING_KEY_SCHEMA,
    audit_index_file,
    audit_queue,
    index_entry_rows,
    key_lookup,
    read_checkpoint,
)
from udfs.fs import join, list_files, resolve
from udfs.schema import KIND_MESSAGE, KIND_SEGMENT_END

REPORT_FORMAT = "rmqstore-audit/1"
DEFAULT_INDEX_SAMPLE = 200_000
EXIT_CLEAN, EXIT_DIVERGENT, EXIT_CANNOT = 0, 1, 2
#: findings of rebuild.json that come from building the index, not from scanning the commitlog
REBUILD_KINDS = ("duplicate-queue-offset", "queue-offset-gap", "segments-skipped")


@dataclasses.dataclass
class AuditResult:
    findings: list[Finding]
    summary: dict[str, Any]
    exit_code: int
    report: dict[str, Any]  # what report.json holds
    repairs: list[dict[str, Any]]  # what ``rmqstore recover`` would change, file by file


class AuditError(RuntimeError):
    """The store could not be audited (exit code 2)."""


@dataclasses.dataclass
class Scope:
    """What an audit covers: the commitlog segments from offset ``start`` on, and what it skips.

    A full audit starts at 0. A ``--since-last`` audit starts at the segment holding the commitlog max offset of
    ``base`` (the last clean run, jobs.history.last_clean_run) and audits only what changed after it.
    """

    start: int
    segments: list[str]  # names of the commitlog segments audited
    base: dict[str, Any] | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)  # what was not audited, and why
    note: str = ""

    def skip(self, count: int, what: str) -> None:
        """Record that ``count`` ``what`` were not audited, unchanged since the base run."""
        if count and self.base:
            when = self.base["started_at"].isoformat(timespec="seconds")
            self.skipped.append(f"{count} {what} unchanged since run {self.base['run_id']} at {when}")

    def to_dict(self) -> dict[str, Any]:
        """report.json's ``run.scope``."""
        return {
            "from_offset": self.start,
            "segments_audited": self.segments,
            "base_run_id": self.base["run_id"] if self.base else None,
            "skipped": self.skipped,
            "note": self.note,
        }


def audit_scope(segments: list[Any], cfg: BrokerConfig, since: dict[str, Any] | None) -> Scope:
    """The whole commitlog; with ``since`` (a clean run's summary), the segments from the one holding its max offset."""
    full = Scope(0, [s.name for s in segments])
    if since is None:
        return full
    base_max = since.get("commitlog_max_offset")
    start = base_max - base_max % cfg.mappedFileSizeCommitLog if base_max is not None else 0
    tail = [s for s in segments if s.start >= start]
    if base_max is None or not tail:
        full.note = f"the commitlog does not reach where run {since['run_id']} ended ({base_max}): full audit"
        return full
    scope = Scope(start, [s.name for s in tail], since)
    scope.skip(len(segments) - len(tail), f"commitlog segments below offset {start}")
    return scope


# --- listing (names and sizes only; contents are read on executors) ---------------------------


def _entries(fs: pafs.FileSystem, path: str, rel: str, findings: list[Finding]) -> list[pafs.FileInfo]:
    """Directory entries of ``path``; names that are not UTF-8 are reported, not returned."""
    out = []
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except OSError as exc:
        findings.append(finding("unreadable-file", rel, f"cannot list: {exc}; not audited"))
        return out
    for info in infos:
        try:
            info.base_name  # noqa: B018 - pyarrow decodes the name here
        except UnicodeDecodeError:
            findings.append(finding("hostile-name", rel, "an entry whose name is not UTF-8; not read"))
            continue
        out.append(info)
    return sorted(out, key=lambda i: i.base_name)


def list_queues(store: str) -> tuple[dict[tuple[str, int], dict[str, int]], list[Finding]]:
    """consumequeue/<topic>/<queueId>/<file>: {(topic, queueId): {file name: size}}, and hostile names."""
    fs, root = resolve(store)
    findings: list[Finding] = []
    queues: dict[tuple[str, int], dict[str, int]] = {}
    for t in _entries(fs, join(root, "consumequeue"), "consumequeue", findings):
        rel = f"consumequeue/{t.base_name!r}" if not is_valid_topic(t.base_name) else f"consumequeue/{t.base_name}"
        if not is_valid_topic(t.base_name) or t.type != pafs.FileType.Directory:
            findings.append(
                finding("hostile-name", rel, f"{t.base_name!r} is not a legal topic directory name; not read")
            )
            continue
        for q in _entries(fs, t.path, rel, findings):
            if (
                not (q.base_name.isdigit() and str(int(q.base_name)) == q.base_name)
                or q.type != pafs.FileType.Directory
            ):
                findings.append(
                    finding(
                        "hostile-name", f"{rel}/{q.base_name!r}", "not a queueId directory; not read", topic=t.base_name
                    )
                )
                continue
            files = queues.setdefault((t.base_name, int(q.base_name)), {})
            for f in _entries(fs, q.path, f"{rel}/{q.base_name}", findings):
                if len(f.base_name) == 20 and f.base_name.isdigit() and f.type == pafs.FileType.File:
                    files[f.base_name] = f.size
                else:
                    findings.append(
                        finding(
                            "stray-file",
                            f"{rel}/{q.base_name}/{f.base_name!r}",
                            "not a ConsumeQueue file name; ignored",
                            topic=t.base_name,
                            queue_id=int(q.base_name),
                        )
                    )
    return queues, findings


def list_index(store: str) -> tuple[list[str], list[Finding]]:
    """index/<yyyyMMddHHmmssSSS> names in load order (the broker sorts them by name)."""
    fs, root = resolve(store)
    findings: list[Finding] = []
    names = []
    for f in _entries(fs, join(root, "index"), "index", findings):
        if len(f.base_name) == 17 and f.base_name.isdigit() and f.type == pafs.FileType.File:
            names.append(f.base_name)
        else:
            findings.append(finding("stray-file", f"index/{f.base_name!r}", "not an IndexFile name; ignored"))
    return names, findings


def store_state(store: str) -> dict[str, Any]:
    """What changes while a broker writes: commitlog sizes and modification times, and the lock."""
    fs, root = resolve(store)
    files = {i.base_name: (i.size, i.mtime_ns) for i in list_files(fs, join(root, "commitlog"))}
    return {"commitlog": files, "locked": lock_held(store), "at": dt.datetime.now(dt.UTC)}


# --- the audit ----------------------------------------------------------------------------------


def _inside(a: str, b: str) -> bool:
    a, b = posixpath.normpath(a), posixpath.normpath(b)
    return a == b or a.startswith(b.rstrip("/") + "/")


def audit(
    spark: Any,
    store: str,
    rebuilt: str | None,
    cfg: BrokerConfig,
    report_dir: str | None,
    index_sample: int = DEFAULT_INDEX_SAMPLE,
    since: dict[str, Any] | None = None,
) -> AuditResult:
    """Audit ``store`` against ``rebuilt`` (rebuilding into a temporary directory when None); write the report.

    ``since``: the summary of the store's last clean run (jobs.history.last_clean_run); only the tail after it
    is audited (``audit_scope``).
    """
    from jobs.rebuild import REPORT_NAME, RebuildError, list_segments, parse_store
    from jobs.rebuild import rebuild as run_rebuild

    t0 = time.monotonic()
    _, store_path = resolve(store)
    if report_dir is not None and _inside(resolve(report_dir)[1], store_path):
        raise AuditError(f"--report {report_dir} is inside the store: an audit never writes into a store")
    before = store_state(store)
    segments, segment_findings = list_segments(store, cfg)
    scope = audit_scope(segments, cfg, since)
    audited = [s for s in segments if s.start >= scope.start]
    tmp = None
    try:
        if rebuilt is None:
            tmp = tempfile.mkdtemp(prefix="rmqstore-audit-")
            rebuilt = posixpath.join(tmp, "rebuilt")
            try:
                result = run_rebuild(spark, store, rebuilt, cfg, on_error="skip-segment")
            except RebuildError as exc:
                raise AuditError(f"the commitlog could not be rebuilt: {exc}") from None
            rebuild_report = result.report
        else:
            rfs, rpath = resolve(rebuilt)
            with rfs.open_input_stream(join(rpath, REPORT_NAME)) as f:
                rebuild_report = json.loads(f.read())
        records = parse_store(spark, audited, cfg).persist()
        try:
            scan = _scan_findings(records, audited, segment_findings)
            kept = [Finding.from_dict(f) for f in rebuild_report["findings"] if f["kind"] in REBUILD_KINDS]
            return _audit(
                spark,
                store,
                rebuilt,
                cfg,
                report_dir,
                index_sample,
                rebuild_report,
                records,
                scan + kept,
                before,
                t0,
                scope,
            )
        finally:
            records.unpersist()
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _audit(
    spark: Any,
    store: str,
    rebuilt: str,
    cfg: BrokerConfig,
    report_dir: str | None,
    index_sample: int,
    rebuild_report: dict[str, Any],
    records: Any,
    findings: list[Finding],
    before: dict[str, Any],
    t0: float,
    scope: Scope,
) -> AuditResult:
    from pyspark.sql import functions as F

    started = before["at"]
    commitlog = rebuild_report["commitlog"]
    cl_min, cl_max = commitlog["min_offset"], commitlog["max_offset"]
    ends = {r["segment"]: r.asDict() for r in records.where(f"kind = {KIND_SEGMENT_END}").collect()}
    stale = _stale([s for s in commitlog["segments"] if s["start"] >= scope.start], ends)
    if stale:
        findings.append(stale)
        return _finish(store, rebuilt, findings, [], [], [], {}, report_dir, started, t0, EXIT_CANNOT, scope)

    # commitlog: what the broker's recovery would do with it
    first_ts = {
        r["segment"]: r["ts"]
        for r in records.where(f"kind = {KIND_MESSAGE}")
        .groupBy("segment")
        .agg(F.min_by("store_timestamp", "commitlog_offset").alias("ts"))
        .collect()
    }
    facts = [
        SegmentFacts(s["file"], s["start"], s["messages"], s["end_offset"], first_ts.get(s["file"], 0))
        for s in commitlog["segments"]
    ]
    live = spark.sparkContext.parallelize([store], 1).map(read_checkpoint).collect()[0]
    checkpoint = Checkpoint(**live["checkpoint"]) if live["checkpoint"] else None
    findings += check_commitlog(
        facts,
        findings,
        checkpoint,
        live["abort"],
        cfg,
        cl_max,
        max((e["last_store_timestamp"] or 0 for e in ends.values()), default=0),
        max((e["last_cq_store_timestamp"] or 0 for e in ends.values()), default=0),
    )

    queue_findings, queue_rows, queue_repairs = _audit_queues(
        spark, store, rebuilt, cfg, records, cl_min, cl_max, scope
    )
    findings += queue_findings
    built_ends = {f["name"]: f["end_phy_offset"] for f in rebuild_report["index_files"]}
    index_findings, index_rows, index_repairs, keys = _audit_index(
        spark, store, rebuilt, cfg, records, max(cl_min, scope.start), index_sample, live, checkpoint, scope, built_ends
    )
    findings += index_findings

    after = store_state(store)
    if after["commitlog"] != before["commitlog"] or after["locked"]:
        changed = sorted(
            n
            for n in set(before["commitlog"]) | set(after["commitlog"])
            if before["commitlog"].get(n) != after["commitlog"].get(n)
        )
        why = "the lock file is held by a running broker" if after["locked"] else ""
        if changed:
            why += ("; " if why else "") + f"commitlog files changed during the audit: {', '.join(changed[:5])}"
        findings.append(finding("store-in-use", "lock" if after["locked"] else "commitlog", why, count=len(changed)))
    repairs = queue_repairs + index_repairs
    counts = {
        "commitlog": {
            "segments": len(commitlog["segments"]),
            "messages": commitlog["messages"],
            "min_offset": cl_min,
            "max_offset": cl_max,
        },
        "queues": {
            "audited": len(queue_rows),
            "ok": sum(1 for r in queue_rows if r["status"] in ("ok", "info")),
        },
        "index": {
            "live_files": sum(1 for r in index_rows if r["live"]),
            "rebuilt_files": sum(1 for r in index_rows if r["rebuilt"]),
            **keys,
        },
    }
    exit_code = EXIT_DIVERGENT if any(is_divergence(f) for f in findings) else EXIT_CLEAN
    return _finish(
        store,
        rebuilt,
        findings,
        queue_rows,
        index_rows,
        repairs,
        counts,
        report_dir,
        started,
        t0,
        exit_code,
        scope,
        facts,
    )


def _scan_findings(records: Any, segments: list[Any], listing: list[Finding]) -> list[Finding]:
    """The commitlog as it is now: the rebuild's own rules applied to this parse (names, gaps, ends, damage)."""
    from jobs.rebuild import classify_ends, damage_findings

    rows = [r.asDict() for r in records.where(f"kind != {KIND_MESSAGE}").collect()]
    ends = {r["segment"]: r for r in rows if r["kind"] == KIND_SEGMENT_END}
    damage = [r for r in rows if r["kind"] != KIND_SEGMENT_END]
    return listing + classify_ends(segments, ends) + damage_findings(damage, segments)


def _stale(segments: list[dict[str, Any]], ends: dict[str, dict[str, Any]]) -> Finding | None:
    """A finding when rebuild.json describes other commitlog segments than the store now holds."""
    now = {name: e["commitlog_offset"] for name, e in ends.items()}
    then = {s["file"]: s["end_offset"] for s in segments}
    for name in sorted(set(now) | set(then)):
        if now.get(name) != then.get(name):
            return finding(
                "rebuilt-stale",
                f"commitlog/{name}",
                "the rebuilt index does not describe this segment as it is now; rebuild it first",
                expected="no segment" if name not in then else f"records end at {then[name]}",
                actual="no segment" if name not in now else f"records end at {now[name]}",
            )
    return None


def _audit_queues(
    spark: Any, store: str, rebuilt: str, cfg: BrokerConfig, records: Any, cl_min: int, cl_max: int, scope: Scope
) -> tuple[list[Finding], list[dict[str, Any]], list[dict[str, Any]]]:
    """One task per queue (union of live and rebuilt queues; since the base run: those the records touch)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    live, findings = list_queues(store)
    built, _ = list_queues(rebuilt)
    keys = sorted(set(live) | set(built))
    if scope.base:
        messages = records.where(f"kind = {KIND_MESSAGE}").select("topic", "queue_id").distinct().collect()
        touched = {(r["topic"], r["queue_id"]) for r in messages}
        scope.skip(len(keys) - len(touched & set(keys)), "queues without messages in the audited segments")
        keys = [k for k in keys if k in touched]
    if not keys:
        return findings, [], []
    schema = T.StructType(
        [
            T.StructField("topic", T.StringType()),
            T.StructField("queue_id", T.IntegerType()),
            T.StructField("live_files", T.ArrayType(T.StringType())),
            T.StructField("rebuilt_files", T.ArrayType(T.StringType())),
        ]
    )
    rows = [(t, q, sorted(live.get((t, q), {})), sorted(built.get((t, q), {}))) for t, q in keys]
    queues = spark.createDataFrame(rows, schema)
    schedule = (
        records.where((F.col("kind") == KIND_MESSAGE) & (F.col("topic") == SCHEDULE_TOPIC) & F.col("to_consume_queue"))
        .groupBy("topic", "queue_id")
        .agg(F.collect_list(F.struct("commitlog_offset", "tags")).alias("schedule"))
    )
    tasks = queues.join(schedule, ["topic", "queue_id"], "left").repartition(min(len(keys), 200))
    results = [
        json.loads(r)
        for r in tasks.rdd.map(lambda row: audit_queue(row.asDict(True), store, rebuilt, cfg, cl_min, cl_max)).collect()
    ]
    rows_out, repairs = [], []
    for r in results:
        findings += [Finding.from_dict(f) for f in r["findings"]]
        if r["row"]:
            rows_out.append(r["row"])
    for r in results:
        if not r["row"]:
            continue
        rel = f"consumequeue/{r['row']['topic']}/{r['row']['queue_id']}"
        why = ", ".join(k for k in r["row"]["kinds"] if KINDS[k].repairable)
        present = live.get((r["row"]["topic"], r["row"]["queue_id"]), {})
        for name in r["write"]:
            repairs.append(_repair("replace" if name in present else "create", f"{rel}/{name}", f"{rel}/{name}", why))
        for name in r["delete"]:
            repairs.append(_repair("delete", f"{rel}/{name}", None, why))
    rows_out.sort(key=lambda q: (q["topic"], q["queue_id"]))
    return findings, rows_out, repairs


def _audit_index(
    spark: Any,
    store: str,
    rebuilt: str,
    cfg: BrokerConfig,
    records: Any,
    from_offset: int,
    index_sample: int,
    live: dict[str, Any],
    checkpoint: Checkpoint | None,
    scope: Scope,
    built_ends: dict[str, int],
) -> tuple[list[Finding], list[dict[str, Any]], list[dict[str, Any]], dict[str, int]]:
    """IndexFiles by position, their entries against the records, and the keys through the broker's lookup.

    Entries pointing below ``from_offset`` are not checked. Since the base run: only the positions whose
    rebuilt file ends at or after ``scope.start`` (``built_ends``: rebuilt name -> endPhyOffset).
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_schema

    names, findings = list_index(store)
    built, _ = list_index(rebuilt)
    keys_info = {"keys_total": 0, "keys_checked": 0, "entries_checked": 0}
    pairs = [
        (i, names[i] if i < len(names) else None, built[i] if i < len(built) else None)
        for i in range(max(len(names), len(built)))
    ]
    if scope.base:
        covering = [p for p in pairs if p[2] is None or built_ends.get(p[2], scope.start) >= scope.start]
        scope.skip(len(pairs) - len(covering), f"index files with no entry at or after offset {scope.start}")
        pairs = covering
    if not cfg.messageIndexEnable or not pairs:
        return findings, [], [], keys_info
    rows = (
        spark.sparkContext.parallelize(pairs, len(pairs))
        .map(lambda p: audit_index_file(p, store, rebuilt, cfg))
        .collect()
    )
    readable = [r["live"] for r in rows if r["live"] and r["header"]]
    for r in rows:
        findings += [Finding.from_dict(f) for f in r["findings"]]
        if (
            live["abort"]
            and checkpoint
            and r["header"]
            and r["header"]["end_timestamp"] > checkpoint.index_msg_timestamp
        ):
            findings.append(
                finding(
                    "index-deleted-on-recovery",
                    f"index/{r['live']}",
                    f"endTimestamp {r['header']['end_timestamp']} is after the checkpoint's indexMsgTimestamp "
                    f"{checkpoint.index_msg_timestamp}: the broker's crash recovery deletes this file and never "
                    "rebuilds its keys",
                    expected=f"indexMsgTimestamp >= {r['header']['end_timestamp']}",
                    actual=str(checkpoint.index_msg_timestamp),
                )
            )

    # every live entry within indexCount points at a record whose keys hash to it
    names_df = spark.createDataFrame([(n,) for n in readable], "name string").repartition(max(1, len(readable)))
    entries = names_df.mapInArrow(index_entry_rows(store, cfg), from_arrow_schema(INDEX_ENTRY_SCHEMA))
    recs = records.where(f"kind = {KIND_MESSAGE}").select(
        F.col("commitlog_offset").alias("phy_offset"), "key_hashes", "topic"
    )
    checked = entries.where(F.col("phy_offset") >= from_offset).join(recs, "phy_offset", "left")
    bad = checked.where(F.col("key_hashes").isNull() | ~F.array_contains("key_hashes", F.col("key_hash")))
    per_file = (
        bad.groupBy("file")
        .agg(
            F.count("*").alias("n"),
            F.min_by(F.struct("entry", "key_hash", "phy_offset", "topic"), "entry").alias("first"),
        )
        .collect()
    )
    keys_info["entries_checked"] = checked.count()
    for r in per_file:
        e = r["first"]
        target = f"the record at {e['phy_offset']} ({e['topic']})" if e["topic"] else "no record"
        findings.append(
            finding(
                "index-bad-entries",
                f"index/{r['file']}",
                f"{r['n']} entries point at a record whose keys do not hash to them, the first is entry {e['entry']}",
                commitlog_offset=e["phy_offset"],
                file_offset=INDEX_HEADER_SIZE
                + cfg.maxHashSlotNum * INDEX_HASH_SLOT_SIZE
                + e["entry"] * INDEX_ENTRY_SIZE,
                count=r["n"],
                expected=f"a record at commitlog offset {e['phy_offset']} with a key of keyHash {e['key_hash']}",
                actual=f"keyHash {e['key_hash']} -> {target}",
            )
        )

    # every key of every indexed message, through the broker's lookup over the live files
    to_keys = T.StructType([T.StructField("key", T.StringType()), T.StructField("commitlog_offset", T.LongType())])
    indexed = records.where((F.col("kind") == KIND_MESSAGE) & (F.size("key_hashes") > 0)).select(
        "topic", "uniq_key", "keys", "commitlog_offset"
    )
    pairs_df = spark.createDataFrame(
        indexed.rdd.flatMap(lambda r: [(k, r[3]) for k in index_keys(r[0], r[1], r[2])]), to_keys
    )
    by_key = pairs_df.groupBy("key").agg(F.collect_list("commitlog_offset").alias("offsets")).persist()
    total = by_key.count()
    sample = by_key if total <= index_sample else by_key.sample(False, index_sample / total, seed=4)
    missing = sample.mapInArrow(key_lookup(store, readable, cfg), from_arrow_schema(MISSING_KEY_SCHEMA)).persist()
    missing_count = missing.count()
    keys_info.update(keys_total=total, keys_checked=sample.count() if total > index_sample else total)
    by_key.unpersist()
    if missing_count:
        first = missing.orderBy("commitlog_offset", "key").first()
        findings.append(
            finding(
                "index-keys-not-found",
                "index",
                f"{missing_count} (key, message) pairs are not found by the broker's lookup over the live IndexFiles "
                f"({keys_info['keys_checked']} of {total} keys checked)",
                commitlog_offset=first["commitlog_offset"],
                count=missing_count,
                expected=f"key {first['key']!r} finds commitlog offset {first['commitlog_offset']}",
                actual="not found",
            )
        )
    missing.unpersist()
    first = min(pairs[0][0], len(names))
    return findings, rows, _index_repairs(rows, findings, names[first - 1] if first else None), keys_info


def _index_repairs(rows: list[dict[str, Any]], findings: list[Finding], previous: str | None) -> list[dict[str, Any]]:
    """Replace differing files by position (keeping live names), create missing ones, delete extra ones.

    ``previous``: the live file before the first row's position (None when it is the first).
    """
    differs = {f.file for f in findings if f.kind == "index-file-differs"}
    out = []
    for r in rows:
        live, built = r["live"], r["rebuilt"]
        if live and built:
            if f"index/{live}" in differs:
                out.append(_repair("replace", f"index/{live}", f"index/{built}", "index-file-differs"))
            previous = live
        elif built:
            previous = index_file_name_after(built, previous)
            out.append(_repair("create", f"index/{previous}", f"index/{built}", "index-missing-file"))
        else:
            out.append(_repair("delete", f"index/{live}", None, "index-extra-file"))
    return out


def _repair(action: str, file: str, source: str | None, reason: str) -> dict[str, Any]:
    """One step of recover's plan: ``file`` (store-relative) from ``source`` (relative to the rebuilt dir)."""
    return {"action": action, "file": file, "source": source, "reason": reason}


def _finish(
    store: str,
    rebuilt: str,
    findings: list[Finding],
    queue_rows: list[dict[str, Any]],
    index_rows: list[dict[str, Any]],
    repairs: list[dict[str, Any]],
    counts: dict[str, Any],
    report_dir: str | None,
    started: dt.datetime,
    t0: float,
    exit_code: int,
    scope: Scope,
    segments: list[SegmentFacts] | None = None,
) -> AuditResult:
    from jobs.audit_report import write_reports

    findings = sorted(findings, key=_order)
    severities = collections.Counter(f.severity for f in findings)
    summary = {
        "exit_code": exit_code,
        "findings": len(findings),
        **{s: severities[s] for s in SEVERITIES},
        "kinds": dict(sorted(collections.Counter(f.kind for f in findings).items())),
        "complete": not any(f.kind in ("unreadable-file", "hostile-name", "store-in-use") for f in findings),
        **counts,
    }
    report = {
        "format": REPORT_FORMAT,
        "run": {
            "store": store,
            "rebuilt": rebuilt,
            "started_at": started.isoformat(),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(),
            "seconds": round(time.monotonic() - t0, 3),
            "segments": [dataclasses.asdict(s) for s in segments or []],
            "scope": scope.to_dict(),
        },
        "summary": summary,
        "findings": [f.to_dict() for f in findings],
        "queues": queue_rows,
        "index_files": [{k: v for k, v in r.items() if k != "findings"} for r in index_rows],
        "repairs": repairs,
    }
    if report_dir is not None:
        write_reports(report_dir, report)
    return AuditResult(findings, summary, exit_code, report, repairs)


def _order(f: Finding) -> tuple[Any, ...]:
    return (-SEVERITIES.index(f.severity), f.file, f.queue_offset or -1, f.commitlog_offset or -1, f.kind)


# --- command line ---------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    from jobs.cli import add_broker_config, add_spark_options

    p.add_argument("--store", required=True, help="the live store root (read only); local path, hdfs:// or s3a://")
    p.add_argument(
        "--rebuilt", metavar="OUT", help="a rebuild of this store (rmqstore rebuild --out); default: rebuild now"
    )
    p.add_argument("--report", required=True, metavar="DIR", help="where report.json and report.html go")
    p.add_argument(
        "--index-sample",
        type=int,
        default=DEFAULT_INDEX_SAMPLE,
        metavar="N",
        help=f"look up at most N distinct keys through the live IndexFiles (default {DEFAULT_INDEX_SAMPLE})",
    )
    p.add_argument(
        "--history", metavar="TABLE", help="append the findings and a summary row to this Delta table (audit history)"
    )
    p.add_argument("--store-id", help="the store's id in the history table (default: derived from the store path)")
    p.add_argument(
        "--since-last",
        action="store_true",
        help="audit only what changed since the store's last clean run in --history (a full audit when none)",
    )
    add_broker_config(p)
    add_spark_options(p)


def run(args: argparse.Namespace) -> int:
    from jobs.audit_report import console_summary
    from jobs.catalog import default_store_id
    from jobs.cli import broker_config
    from jobs.session import spark_session

    if (args.since_last or args.store_id) and not args.history:
        print("rmqstore audit: --since-last and --store-id need --history TABLE", file=sys.stderr)
        return EXIT_CANNOT
    cfg = broker_config(args)
    spark, _ = spark_session("rmqstore-audit", args.master, args.profile, args.conf)
    store_id = args.store_id or default_store_id(args.store)
    started, since, result = dt.datetime.now(dt.UTC), None, None
    try:
        since = _last_clean_run(spark, args.history, store_id) if args.since_last else None
        result = audit(spark, args.store, args.rebuilt, cfg, args.report, args.index_sample, since)
    except (AuditError, ValueError) as exc:
        print(f"rmqstore audit: cannot audit: {exc}", file=sys.stderr)
    except Exception as exc:  # a Spark task failed (e.g. a segment vanished): exit 2 drives the alert, not a trace
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"rmqstore audit: cannot audit: {type(exc).__name__}: {first}", file=sys.stderr)
    if result is not None and args.since_last and since is None:
        result.report["run"]["scope"]["note"] = f"no clean run of store {store_id} in {args.history} yet: full audit"
    exit_code = result.exit_code if result is not None else EXIT_CANNOT
    if args.history:
        exit_code = _record(spark, args.history, store_id, started, result, args.report) or exit_code
    if result is not None:
        print(console_summary(result.report, args.report))
    return exit_code


def _last_clean_run(spark: Any, table: str, store_id: str) -> dict[str, Any] | None:
    from jobs.history import last_clean_run

    try:
        return last_clean_run(spark, table, store_id)
    except Exception as exc:  # an unreadable table: auditing only the tail would rest on nothing
        raise AuditError(f"cannot read the history table {table}: {exc}") from None


def _record(
    spark: Any, table: str, store_id: str, started: dt.datetime, result: AuditResult | None, report_dir: str
) -> int | None:
    """Append the run to the history table and name it in the report; EXIT_CANNOT when that fails, else None.

    A run that could not audit (``result`` None) still gets its summary row, with exit code 2.
    """
    from jobs.audit_report import write_reports
    from jobs.history import append_history

    run: dict[str, Any] = {"store": store_id, "started_at": started, "exit_code": EXIT_CANNOT}
    findings: list[dict[str, Any]] = []
    if result is not None:
        report, scope = result.report, result.report["run"]["scope"]
        run.update(
            started_at=dt.datetime.fromisoformat(report["run"]["started_at"]),
            finished_at=dt.datetime.fromisoformat(report["run"]["finished_at"]),
            exit_code=result.exit_code,
            commitlog_max_offset=report["summary"].get("commitlog", {}).get("max_offset"),
            segments_audited=scope["segments_audited"],
            skipped=scope["skipped"],
            base_run_id=scope["base_run_id"],
        )
        findings = report["findings"]
    run.setdefault("finished_at", dt.datetime.now(dt.UTC))
    try:
        version = append_history(spark, table, run, findings)
        history: dict[str, Any] = {"table": table, "run_id": run["run_id"], "version": version}
        print(f"history: run {run['run_id']} appended to {table} (version {version})")
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        history = {"table": table, "run_id": run.get("run_id"), "error": first}
        print(f"rmqstore audit: could not write the history table {table}: {first}", file=sys.stderr)
    if result is not None:
        result.report["run"]["history"] = history
        write_reports(report_dir, result.report)
    return EXIT_CANNOT if "error" in history else None


if __name__ == "__main__":
    from jobs.cli import run_verb

    sys.exit(run_verb("audit", None))
