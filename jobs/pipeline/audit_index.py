"""The audit's IndexFile stage: files by position, their entries against the records, the broker's key lookup."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.pipeline.context import spark_schema
from jobs.pipeline.listing import list_index
from storelib.audit import index_repairs
from storelib.constants import INDEX_ENTRY_SIZE, INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE
from storelib.dispatch import index_keys
from storelib.findings import Finding, finding
from storelib.layout import index_file
from udfs.audit import INDEX_ENTRY_SCHEMA, MISSING_KEY_SCHEMA, audit_index_file, index_entry_rows, key_lookup

if TYPE_CHECKING:
    from jobs.pipeline.audit import Audit

_KEY_SCHEMA = T.StructType([T.StructField("key", T.StringType()), T.StructField("commitlog_offset", T.LongType())])


def audit_index(a: Audit) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Index findings and repairs into ``a``; the per-position rows of the report and the lookup counts.

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
    keys_info["entries_checked"] = _check_entries(a, readable, from_offset)
    keys_info.update(_check_keys(a, readable))
    first = min(pairs[0][0], len(names))
    a.repairs += index_repairs(rows, a.findings, names[first - 1] if first else None)
    return rows, keys_info


def _deleted_on_recovery(a: Audit, row: dict[str, Any]) -> list[Finding]:
    """Crash recovery deletes IndexFiles whose endTimestamp is after the checkpoint's indexMsgTimestamp."""
    header, cp = row["header"], a.checkpoint
    if not (a.abort and cp and header and header["end_timestamp"] > cp.index_msg_timestamp):
        return []
    return [
        finding(
            "index-deleted-on-recovery",
            index_file(row["live"]),
            f"endTimestamp {header['end_timestamp']} is after the checkpoint's indexMsgTimestamp "
            f"{cp.index_msg_timestamp}: the broker's crash recovery deletes this file and never rebuilds its keys",
            expected=f"indexMsgTimestamp >= {header['end_timestamp']}",
            actual=str(cp.index_msg_timestamp),
        )
    ]


def _check_entries(a: Audit, readable: list[str], from_offset: int) -> int:
    """Every live entry within indexCount points at a record whose keys hash to it; returns entries checked."""
    spark, cfg = a.run.spark, a.cfg
    names_df = spark.createDataFrame([(n,) for n in readable], "name string").repartition(max(1, len(readable)))
    entries = names_df.mapInArrow(index_entry_rows(a.store, cfg), spark_schema(INDEX_ENTRY_SCHEMA))
    recs = a.records.select(F.col("commitlog_offset").alias("phy_offset"), "key_hashes", "topic")
    checked = entries.where(F.col("phy_offset") >= from_offset).join(recs, "phy_offset", "left")
    bad = checked.where(F.col("key_hashes").isNull() | ~F.array_contains("key_hashes", F.col("key_hash")))
    first = F.min_by(F.struct("entry", "key_hash", "phy_offset", "topic"), "entry").alias("first")
    for r in bad.groupBy("file").agg(F.count("*").alias("n"), first).collect():
        e = r["first"]
        target = f"the record at {e['phy_offset']} ({e['topic']})" if e["topic"] else "no record"
        a.findings.append(
            finding(
                "index-bad-entries",
                index_file(r["file"]),
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
    return checked.count()


def _check_keys(a: Audit, readable: list[str]) -> dict[str, int]:
    """Every key of every indexed message, through the broker's lookup over the live files (sampled)."""
    indexed = a.records.where(F.size("key_hashes") > 0).select("topic", "uniq_key", "keys", "commitlog_offset")
    pairs = indexed.rdd.flatMap(lambda r: [(k, r[3]) for k in index_keys(r[0], r[1], r[2])])
    by_key = (
        a.run.spark.createDataFrame(pairs, _KEY_SCHEMA)
        .groupBy("key")
        .agg(F.collect_list("commitlog_offset").alias("offsets"))
        .persist()
    )
    total = by_key.count()
    sample = by_key if total <= a.index_sample else by_key.sample(False, a.index_sample / total, seed=4)
    lookup = key_lookup(a.store, readable, a.cfg)
    missing = sample.mapInArrow(lookup, spark_schema(MISSING_KEY_SCHEMA)).persist()
    missing_count = missing.count()
    info = {"keys_total": total, "keys_checked": sample.count() if total > a.index_sample else total}
    by_key.unpersist()
    if missing_count:
        first = missing.orderBy("commitlog_offset", "key").first()
        a.findings.append(
            finding(
                "index-keys-not-found",
                "index",
                f"{missing_count} (key, message) pairs are not found by the broker's lookup over the live IndexFiles "
                f"({info['keys_checked']} of {total} keys checked)",
                commitlog_offset=first["commitlog_offset"],
                count=missing_count,
                expected=f"key {first['key']!r} finds commitlog offset {first['commitlog_offset']}",
                actual="not found",
            )
        )
    missing.unpersist()
    return info
