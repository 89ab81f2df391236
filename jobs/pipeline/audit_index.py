"""The audit's IndexFile stage: files by position, their entries against the records, the broker's key lookup."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from jobs.pipeline.context import spark_schema
from jobs.pipeline.listing import list_index
from storelib.audit import index_repairs
from storelib.checkpoint import Checkpoint
from storelib.constants import INDEX_ENTRY_SIZE, INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE
from storelib.findings import Finding, finding
from storelib.layout import index_file
from storelib.restart import index_deleted
from udfs.audit import FOUND_SCHEMA, INDEX_ENTRY_SCHEMA, audit_index_file, index_entry_rows, reachable_rows

if TYPE_CHECKING:
    from jobs.pipeline.audit import Audit


def audit_index(a: Audit) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Index findings and repairs into ``a``; the per-position rows of the report and the lookup counts.

    Everything is judged from IndexFile entries (keyHash, commitlog offset): the broker's lookup matches keys
    by keyHash alone, so the rebuilt files' entries are every key of every indexed message, and no second
    parse of the commitlog is needed.

    Entries pointing below the audited range are not checked. Since the base run: only the positions whose
    rebuilt file ends at or after the scope's start.
    """
    names, found = list_index(a.store)
    a.findings += found
    built, _ = list_index(a.rebuilt)
    keys_info = {"keys_total": 0, "keys_checked": 0, "entries_checked": 0}
    pairs = [
        (i, names[i] if i < len(names) else None, built[i] if i < len(built) else None)
        for i in range(max(len(names), len(built)))
    ]
    if a.scope.base:
        ends = {f["name"]: f["end_phy_offset"] for f in a.rebuild_report["index_files"]}
        covering = [p for p in pairs if p[2] is None or ends.get(p[2], a.scope.start) >= a.scope.start]
        a.scope.skip(len(pairs) - len(covering), f"index files with no entry at or after offset {a.scope.start}")
        pairs = covering
    if not a.cfg.messageIndexEnable or not pairs:
        return [], keys_info
    store, rebuilt, cfg = a.store, a.rebuilt, a.cfg
    rows = a.run.spark.sparkContext.parallelize(pairs, len(pairs)).map(
        lambda p: audit_index_file(p, store, rebuilt, cfg)
    )
    rows = rows.collect()
    for r in rows:
        a.findings += [Finding.from_dict(f) for f in r["findings"]]
        a.findings += _deleted_on_recovery(a, r)
    readable = [r["live"] for r in rows if r["live"] and r["header"]]
    from_offset = max(a.rebuild_report["commitlog"]["min_offset"], a.scope.start)
    rebuilt_entries = _entries(a, a.rebuilt, [r["rebuilt"] for r in rows if r["rebuilt"]], from_offset).persist()
    live_entries = _entries(a, a.store, readable, from_offset).persist()
    try:
        keys_info["entries_checked"] = _check_entries(a, live_entries, rebuilt_entries)
        keys_info.update(_check_keys(a, readable, rebuilt_entries))
    finally:
        live_entries.unpersist()
        rebuilt_entries.unpersist()
    first = min(pairs[0][0], len(names))
    a.repairs += index_repairs(rows, a.findings, names[first - 1] if first else None)
    return rows, keys_info


def _deleted_on_recovery(a: Audit, row: dict[str, Any]) -> list[Finding]:
    """Crash recovery deletes IndexFiles whose endTimestamp is after the checkpoint's indexMsgTimestamp."""
    header = row["header"]
    if not (header and index_deleted(a.abort, header["end_timestamp"], a.checkpoint)):
        return []
    cp = a.checkpoint or Checkpoint()  # the broker reads a missing checkpoint as zeros
    fate = "never rebuilds its keys"
    if a.restart and a.restart.dispatch_from <= header["begin_phy_offset"]:
        fate = f"indexes its records again (it re-dispatches from commitlog offset {a.restart.dispatch_from:,})"
    elif a.restart:
        fate = f"never indexes again its records before commitlog offset {a.restart.dispatch_from:,}"
    return [
        finding(
            "index-deleted-on-recovery",
            index_file(row["live"]),
            f"endTimestamp {header['end_timestamp']} is after the checkpoint's indexMsgTimestamp "
            f"{cp.index_msg_timestamp}: the broker's crash recovery deletes this file and {fate}",
            expected=f"indexMsgTimestamp >= {header['end_timestamp']}",
            actual=str(cp.index_msg_timestamp),
        )
    ]


def _entries(a: Audit, store: str, names: list[str], from_offset: int) -> Any:
    """(file, entry, key_hash, phy_offset) of the IndexFiles ``names`` of ``store``, at or after ``from_offset``
    (each used twice: the caller persists them, so each file is read once)."""
    spark = a.run.spark
    names_df = spark.createDataFrame([(n,) for n in names], "name string").repartition(max(1, len(names)))
    rows = names_df.mapInArrow(index_entry_rows(store, a.cfg), spark_schema(INDEX_ENTRY_SCHEMA))
    return rows.where(F.col("phy_offset") >= from_offset)


def _check_entries(a: Audit, live: Any, rebuilt: Any) -> int:
    """Every live entry within indexCount is a rebuilt entry: its keyHash is a key of the record it points at."""
    cfg = a.cfg
    bad = live.join(rebuilt.select("key_hash", "phy_offset"), ["key_hash", "phy_offset"], "left_anti")
    first = F.min_by(F.struct("entry", "key_hash", "phy_offset"), "entry").alias("first")
    for r in bad.groupBy("file").agg(F.count("*").alias("n"), first).collect():
        e = r["first"]
        a.findings.append(
            finding(
                "index-bad-entries",
                index_file(r["file"]),
                f"{r['n']} entries point at no record with a key of their keyHash, the first is entry {e['entry']}",
                commitlog_offset=e["phy_offset"],
                file_offset=INDEX_HEADER_SIZE
                + cfg.maxHashSlotNum * INDEX_HASH_SLOT_SIZE
                + e["entry"] * INDEX_ENTRY_SIZE,
                count=r["n"],
                expected=f"a record at commitlog offset {e['phy_offset']} with a key of keyHash {e['key_hash']}",
                actual=f"keyHash {e['key_hash']} -> no such record",
            )
        )
    return live.count()


def _check_keys(a: Audit, readable: list[str], rebuilt: Any) -> dict[str, int]:
    """Every key of every indexed message (a rebuilt entry: keyHash, commitlog offset) is found by the broker's
    lookup over the live files; at most ``index_sample`` of them are checked."""
    spark = a.run.spark
    names_df = spark.createDataFrame([(n,) for n in readable], "name string").repartition(max(1, len(readable)))
    found = names_df.mapInArrow(reachable_rows(a.store, a.cfg), spark_schema(FOUND_SCHEMA))
    wanted = rebuilt.select("key_hash", "phy_offset").distinct().persist()
    total = wanted.count()
    sample = wanted if total <= a.index_sample else wanted.sample(False, a.index_sample / total, seed=4)
    missing = sample.join(found, ["key_hash", "phy_offset"], "left_anti").persist()
    missing_count = missing.count()
    info = {"keys_total": total, "keys_checked": sample.count() if total > a.index_sample else total}
    if missing_count:
        first = missing.orderBy("phy_offset", "key_hash").first()
        a.findings.append(
            finding(
                "index-keys-not-found",
                "index",
                f"{missing_count} (key, message) pairs are not found by the broker's lookup over the live IndexFiles "
                f"({info['keys_checked']} of {total} checked)",
                commitlog_offset=first["phy_offset"],
                count=missing_count,
                expected=f"keyHash {first['key_hash']} finds commitlog offset {first['phy_offset']}",
                actual="not found",
            )
        )
    missing.unpersist()
    wanted.unpersist()
    return info
