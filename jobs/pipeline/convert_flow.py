"""``rmqstore convert`` on the driver: a DLedger (or mixed) store into a new plain CommitLog store
(storelib.formats.dledger_convert).

1. list and scan the source's segments (the rebuild's scan: damage stops the run, nothing is written);
2. one task per segment writes the plain commitlog segment of the same start offset into a staging directory;
3. config/ (topics, subscriptions, consumer offsets) is copied; consumequeue/, batchconsumequeue/, index/ and the
   checkpoint are rebuilt from the new segments; the staging directory is published by rename.
The source is only read. Not carried over: the DLedger node's own files, the timer log (it holds commitlog
offsets), RocksDB and compaction data, abort and lock.
"""

from __future__ import annotations

import dataclasses

import pyarrow.fs as pafs

from jobs.pipeline.context import Run, numbered_tasks, spark_schema
from jobs.pipeline.listing import check_outside_store
from jobs.pipeline.rebuild_flow import list_segments, publish, rebuild, scan_segments, store_rules
from storelib.broker.segments import damage_findings, judge_ends, segment_errors, settle_torn_tail
from storelib.errors import BadInput, DamageStop
from storelib.findings import Finding
from storelib.layout import BATCH_CONSUMEQUEUE, CHECKPOINT, CONSUMEQUEUE, INDEX
from udfs.convert_tasks import CONVERTED_SCHEMA, segment_converter
from udfs.fs import join, resolve

#: what a converted store takes from the source as it is
COPIED = ("config",)
#: what the rebuild of the converted segments gives it
REBUILT = (CONSUMEQUEUE, BATCH_CONSUMEQUEUE, INDEX, CHECKPOINT)


@dataclasses.dataclass
class Converted:
    out: str
    segments: int
    messages: int
    findings: list[Finding]


def check_convert_output(store: str, out: str) -> None:
    """OUT is outside the store and does not exist yet (a conversion never replaces anything)."""
    check_outside_store(store, out, "--out")
    fs, path = resolve(out)
    if fs.get_file_info(path).type != pafs.FileType.NotFound:
        raise BadInput(f"--out {out} exists; convert writes a new store only")


def convert(run: Run, store: str, out: str) -> Converted:
    """Convert ``store`` into a new plain CommitLog store at ``out``; DamageStop (nothing written) on damage."""
    check_convert_output(store, out)
    segments, findings = list_segments(store, run.cfg)
    run = store_rules(run, store, segments)
    with run.work_dir(out) as work, run.work_dir(out, same_filesystem=True) as near:
        summaries = settle_torn_tail(segments, scan_segments(run, segments, f"{work}/scratch"))
        findings += judge_ends(segments, summaries) + damage_findings(segments, summaries)
        errors = segment_errors(findings)
        if errors or any(s.damage for s in summaries.values()):
            raise DamageStop("the source store is damaged; nothing was written (audit or recover it first)", findings)
        staging = f"{near}/out"
        task = segment_converter(staging, segments)
        numbered_tasks(run, len(segments)).mapInArrow(task, spark_schema(CONVERTED_SCHEMA)).collect()
        _copy(store, staging, COPIED)
        # the records keep what DLedger wrote (BatchCQ records without INNER_BASE): rebuilt as the broker did
        written_by = dataclasses.replace(run.cfg, enableDLegerCommitLog=True)
        result = rebuild(Run(run.spark, written_by, run.progress, run.work_root), staging, f"{work}/rebuilt")
        _copy(f"{work}/rebuilt", staging, REBUILT)
        publish(staging, out)
    messages = sum(s.messages for s in summaries.values())
    return Converted(out, len(segments), messages, findings + list(result.report.findings))


def _copy(src: str, dst: str, names: tuple[str, ...]) -> None:
    """``names`` (files or directories) of ``src`` into ``dst``, those ``src`` holds."""
    fs, root = resolve(src)
    dfs, droot = resolve(dst)
    for name in names:
        kind = fs.get_file_info(join(root, name)).type
        if kind in (pafs.FileType.Directory, pafs.FileType.File):
            dfs.create_dir(join(droot, name) if kind == pafs.FileType.Directory else droot, recursive=True)
            pafs.copy_files(join(root, name), join(droot, name), source_filesystem=fs, destination_filesystem=dfs)
