"""What differs between broker versions, as data: one rule set per range of releases, and how to tell the
range from a store's own bytes.

Rule sets (first release of each row; a version uses the last row at or below it):

- 4.9: index keys ``topic#UNIQ_KEY``, ``topic#<KEYS token>``; LMQ: every INNER_MULTI_DISPATCH name gets an
  offset and no source topic is excluded (the SCHEDULE_TOPIC_XXXX copy of a delayed LMQ message is dispatched
  to the LMQ queues too); no BatchConsumeQueue.
- 5.0: BatchConsumeQueue for ``queue.type=BatchCQ`` topics; LMQ offsets only for ``%LMQ%`` names.
- 5.1.1: LMQ skips ``%RETRY%*`` source topics. 5.1.2: also rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX, and
  names holding a path separator.
- 5.2: LMQ skips every ``rmq_sys_*`` source topic; properties end with 0x02; optional ``__CRC32#``.
- 5.5: a third index key ``topic#T#<TAGS>`` after the KEYS tokens.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from storelib.commitlog import MESSAGE_MAGIC_CODE_V2, RecordBatch
from storelib.errors import ConfigError
from storelib.rocksdbcq import ROCKSDB_FILE, is_rocksdb

CRC32_NAME = b"__CRC32#"
CRC32_PIECE = 20  # CommitLog.CRC32_RESERVED_LEN: __CRC32# 0x01, ten digits least significant first, 0x02
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?\Z")


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """The dispatch rules of a range of broker releases (``first`` = its first release)."""

    name: str
    first: tuple[int, int, int]
    index_tag_keys: bool  # IndexService.buildIndex puts topic#T#<TAGS> (5.5.0+)
    lmq_names_need_prefix: bool  # only %LMQ% names get an INNER_MULTI_QUEUE_OFFSET (5.0.0+)
    lmq_skip_source_prefixes: tuple[str, ...]  # source topics never multi-dispatched (MultiDispatchUtils)
    lmq_skip_source_topics: tuple[str, ...]
    lmq_skip_path_names: bool  # a name holding File.separator is skipped (5.1.2+)
    batch_cq: bool  # queue.type=BatchCQ topics go to batchconsumequeue/ (5.0.0+)
    schedule_tagscode_quirk: bool  # crash recovery may write the TAGS hash into SCHEDULE_TOPIC_XXXX (4.9.x)

    def lmq_source_allowed(self, topic: str) -> bool:
        """Whether records of ``topic`` are multi-dispatched to LMQ queues at all."""
        return topic not in self.lmq_skip_source_topics and not topic.startswith(self.lmq_skip_source_prefixes)

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "first_release": version_text(self.first)}


_TIMER, _SCHEDULE = "rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"
#: what each release range changes from the one before it
_CHANGES: tuple[tuple[str, tuple[int, int, int], dict[str, object]], ...] = (
    ("5.0", (5, 0, 0), {"lmq_names_need_prefix": True, "batch_cq": True, "schedule_tagscode_quirk": False}),
    ("5.1.1", (5, 1, 1), {"lmq_skip_source_prefixes": ("%RETRY%",)}),
    ("5.1.2", (5, 1, 2), {"lmq_skip_source_topics": (_TIMER, _SCHEDULE), "lmq_skip_path_names": True}),
    ("5.2", (5, 2, 0), {"lmq_skip_source_prefixes": ("%RETRY%", "rmq_sys_"), "lmq_skip_source_topics": (_SCHEDULE,)}),
    ("5.5", (5, 5, 0), {"index_tag_keys": True}),
)


def _rule_sets() -> tuple[RuleSet, ...]:
    rows = [RuleSet("4.9", (4, 9, 0), False, False, (), (), False, False, True)]
    for name, first, changes in _CHANGES:
        rows.append(dataclasses.replace(rows[-1], name=name, first=first, **changes))  # type: ignore[arg-type]
    return tuple(rows)


RULE_SETS = _rule_sets()


def parse_version(text: str) -> tuple[int, int, int]:
    """``4.9``, ``5.3.3``, ``5.5.0`` -> (major, minor, patch); a missing patch is 0."""
    m = _VERSION.match(text.strip())
    if not m:
        raise ConfigError(f"broker version {text!r}: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 5.5 or 4.9.8")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def version_text(v: tuple[int, int, int] | None) -> str | None:
    """(5, 5, 0) -> "5.5.0"."""
    return ".".join(map(str, v)) if v else None


def rules_for(version: str | tuple[int, int, int]) -> RuleSet:
    """The rule set of a broker release; releases before 4.9 or from 6.0 on are refused (not covered)."""
    v = parse_version(version) if isinstance(version, str) else version
    if not (4, 9, 0) <= v < (6, 0, 0):
        raise ConfigError(f"broker version {'.'.join(map(str, v))} is not supported (4.9.x and 5.x are)")
    return [r for r in RULE_SETS if r.first <= v][-1]


# --- detection -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Clue:
    """One fact read off a store and the release range it implies (``at_least``/``below``, None = open)."""

    clue: str
    detail: str
    at_least: tuple[int, int, int] | None = None
    below: tuple[int, int, int] | None = None

    @property
    def text(self) -> str:
        """The detail and the release range it implies, e.g. "... (5.2.0+)" or "... (before 5.5.0)"."""
        bound = f"{version_text(self.at_least)}+" if self.at_least else f"before {version_text(self.below)}"
        return f"{self.detail} ({bound})"

    def to_dict(self) -> dict[str, object]:
        return {
            "clue": self.clue,
            "detail": self.text,
            "at_least": version_text(self.at_least),
            "below": version_text(self.below),
        }


@dataclasses.dataclass(frozen=True)
class StoreFacts:
    """What detection reads: store-root entries, consumequeue/ entries, the checkpoint, sampled records."""

    root_entries: frozenset[str] = frozenset()
    consumequeue_entries: frozenset[str] = frozenset()  # of consumequeue/ and consumequeue_rocksdb/
    checkpoint: bytes = b""
    v2_records: int = 0  # sampled records with MESSAGE_MAGIC_CODE_V2
    props_records: int = 0  # sampled records with a non-empty properties string
    props_ending_02: int = 0  # ... of which end with 0x02
    crc_property_records: int = 0  # sampled records holding __CRC32#
    tag_keys_found: int | None = None  # sampled tagged records whose topic#T#tags chain leads to them
    tag_keys_checked: int = 0  # sampled tagged records inside a live IndexFile whose UNIQ_KEY was found


def record_clues(b: RecordBatch, counts: dict[str, int]) -> dict[str, int]:
    """``counts`` (StoreFacts record fields) plus a batch of sampled records: V2 magic, properties ending in
    0x02, and a ``__CRC32#`` piece as the last 20 bytes."""
    record_start = b.props_start + b.props_len - b.total_size
    magic = b.buf[record_start[:, None] + np.arange(4, 8)].view(">i4").ravel()
    props_end = b.props_start + b.props_len
    has_props = b.props_len > 0
    tail = b.buf[np.maximum(props_end - CRC32_PIECE, 0)[:, None] + np.arange(len(CRC32_NAME))]
    crc = (tail == np.frombuffer(CRC32_NAME, np.uint8)).all(axis=1) & (b.props_len >= CRC32_PIECE)
    return {
        "v2_records": counts.get("v2_records", 0) + int((magic == MESSAGE_MAGIC_CODE_V2).sum()),
        "props_records": counts.get("props_records", 0) + int(has_props.sum()),
        "props_ending_02": counts.get("props_ending_02", 0) + int((has_props & (b.buf[props_end - 1] == 2)).sum()),
        "crc_property_records": counts.get("crc_property_records", 0) + int(crc.sum()),
    }


def clues(f: StoreFacts) -> list[Clue]:
    """Every clue the facts hold, in a fixed order."""
    out = []
    v50, v511, v52, v55 = (5, 0, 0), (5, 1, 1), (5, 2, 0), (5, 5, 0)
    for entry in ("batchconsumequeue", "timerlog", "timerwheel"):
        if entry in f.root_entries:
            out.append(Clue(f"{entry}/", f"the store root holds {entry}", at_least=v50))
    rocks = sorted(e for e in f.consumequeue_entries if ROCKSDB_FILE.match(e))
    if is_rocksdb(f.consumequeue_entries):
        out.append(Clue("rocksdb-consumequeue", f"RocksDB files hold the ConsumeQueue ({', '.join(rocks[:3])})", v52))
    cp = f.checkpoint.ljust(48, b"\0")
    for at, name, since in (
        (24, "masterFlushedOffset", v50),
        (32, "confirmPhyOffset", v511),
        (40, "logicsPhysicalOffset", v55),
    ):
        if any(cp[at : at + 8]):
            out.append(Clue(f"checkpoint {name}", f"checkpoint {name} (bytes {at}..{at + 7}) is set", at_least=since))
    if f.v2_records:
        out.append(Clue("v2 magic", f"{f.v2_records} sampled record(s) use MESSAGE_MAGIC_CODE_V2", (5, 1, 0)))
    props = f"{f.props_records} sampled property strings end with 0x02"
    if f.props_records and f.props_ending_02 == f.props_records:
        out.append(Clue("properties end 0x02", f"all {props}", at_least=v52))
    elif f.props_records and f.props_ending_02 == 0:
        out.append(Clue("properties end 0x02", f"none of {props}", below=v52))
    if f.crc_property_records:
        out.append(Clue("__CRC32#", f"{f.crc_property_records} sampled record(s) hold __CRC32#", at_least=v52))
    if f.tag_keys_checked:
        found, n = f.tag_keys_found or 0, f.tag_keys_checked
        if found == n:
            out.append(Clue("index tag keys", f"topic#T#<TAGS> leads to all {n} sampled tagged messages", v55))
        elif found == 0:
            out.append(
                Clue("index tag keys", f"topic#T#<TAGS> leads to none of {n} sampled tagged messages", below=v55)
            )
    return out


def detect(f: StoreFacts) -> tuple[RuleSet, list[Clue], str]:
    """The rule set the store's clues point to, the clues, and why in one sentence.

    The lowest release every clue allows is taken (no clue at all: 4.9); clues that contradict each other
    (a lower bound at or above an upper bound) are refused: give ``--broker-version``.
    """
    found = clues(f)
    low = max((c.at_least for c in found if c.at_least), default=(4, 9, 0))
    high = min((c.below for c in found if c.below), default=None)
    if high is not None and low >= high:
        raise ConfigError(
            "the store's clues contradict each other (" + "; ".join(c.text for c in found) + "): give --broker-version"
        )
    rules = rules_for(low)
    why = "; ".join(c.text for c in found) or "no 5.x clue in the store"
    return rules, found, f"rules {rules.name} detected: {why}"


def select(version: str, facts: StoreFacts) -> tuple[RuleSet, dict[str, object]]:
    """The rule set to use, and why as rebuild.json's ``broker_rules``: a given ``--broker-version`` wins over
    detection from the store."""
    if version:
        rules = rules_for(version)
        return rules, {
            **rules.to_dict(),
            "source": "--broker-version",
            "version": version,
            "why": f"--broker-version {version}",
            "clues": [],
        }
    rules, found, why = detect(facts)
    return rules, {**rules.to_dict(), "source": "detected", "why": why, "clues": [c.to_dict() for c in found]}
