"""The release table: what differs between broker releases, one row per release where something changes. How a
store's own bytes tell the releases apart: storelib.broker.detection; which rule set a store gets:
storelib.broker.rule_choice.

Each row (``RuleSet``) holds from its first release up to the next row's: the dispatch rules (IndexFile keys and
hashSlotCount, LMQ, BatchConsumeQueue, the properties parse), which source topics an append gives LMQ offsets, the
commitlog recovery rules (storelib.broker.restart), and ``verified_by``: the real broker releases whose own files a test
compared with ours for that row (tests/test_release_matrix.py; tests/broker/FACTS.md, "Release by release"). A row
no broker checked is unverified: detection never writes bytes with it (``BrokerRules.settle``), and the console line
says so when ``--broker-version`` asks for it.

- 4.0: index keys ``topic#UNIQ_KEY``, ``topic#<KEYS token>``; the IndexFile header's hashSlotCount counts every put;
  ``string2messageProperties`` splits each pair with ``split``: a pair of three parts is no property; no LMQ.
- 4.7.1: hashSlotCount counts occupied slots only. 4.9.1: pairs split at the first 0x01.
- 4.9.3: LMQ: every INNER_MULTI_DISPATCH name gets an offset and no source topic is excluded (the
  SCHEDULE_TOPIC_XXXX copy of a delayed LMQ message is dispatched to the LMQ queues too).
- 5.0: BatchConsumeQueue for ``queue.type=BatchCQ`` topics; LMQ offsets only for ``%LMQ%`` names, assigned under the
  source queue's lock only (racing appends repeat or skip them): LMQ units go at the queue's write position.
- 5.1.1: LMQ skips ``%RETRY%*`` source topics. 5.1.2: also rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX, and
  names holding a path separator.
- 5.2: LMQ skips every ``rmq_sys_*`` source topic, whose appends still get offsets; properties end with 0x02; optional
  ``__CRC32#``.
- 5.3.1: appends give no LMQ offset to copies dispatch skips (and from 5.2.0 none race): LMQ units at their offsets.
- 5.4: a third index key ``topic#T#<TAGS>`` after the KEYS tokens.
"""

from __future__ import annotations

import dataclasses
import re

from storelib.constants import SCHEDULE_TOPIC, TIMER_TOPIC
from storelib.errors import ConfigError

CRC32_PIECE = 20  # CommitLog.CRC32_RESERVED_LEN: __CRC32# 0x01, ten digits least significant first, 0x02
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?\Z")
Version = tuple[int, int, int]
#: the release whose rules a config without brokerVersion stands for (the shared 4.9.8 format spec)
DEFAULT_RELEASE = "4.9.8"
#: the releases the table covers: 4.0.0 up to (not including) 6.0.0
FIRST: Version = (4, 0, 0)
END: Version = (6, 0, 0)
#: commitlog recovery start rules (storelib.broker.restart)
THIRD_LAST = "third-last"  # mappedFiles.size() - 3, at least 0
CQ_OFFSET = "cq-offset"  # the last segment starting at or before maxPhyOffsetOfConsumeQueue, else the first
TIMESTAMP = "timestamp"  # the last whose first storeTimestamp is not 0 and <= the checkpoint's min timestamp
MATCHED = "matched"  # the last whose first record the ConsumeQueueStore and the IndexService accept


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """One row of the release table: the rules of the releases from ``first`` up to the next row's first."""

    name: str
    first: Version
    verified_by: tuple[str, ...]  # real broker releases whose own files a test compared with ours for this row
    properties_split_pairs: bool  # string2messageProperties: split("\x01") must give two parts (before 4.9.1)
    hash_slot_every_put: bool  # IndexFile.putKey: incHashSlotCount on every put (before 4.7.1)
    multi_dispatch: bool  # LMQ: INNER_MULTI_DISPATCH records go to LMQ queues at all (4.9.3+)
    index_tag_keys: bool  # IndexService.buildIndex puts topic#T#<TAGS> (5.4.0+)
    lmq_names_need_prefix: bool  # only %LMQ% names get an INNER_MULTI_QUEUE_OFFSET (5.0.0+)
    lmq_skip_source_prefixes: tuple[str, ...]  # source topics never multi-dispatched (MultiDispatchUtils)
    lmq_skip_source_topics: tuple[str, ...]
    lmq_skip_path_names: bool  # a name holding File.separator is skipped (5.1.2+)
    lmq_offset_skip_prefixes: tuple[str, ...]  # source topics whose appends get no INNER_MULTI_QUEUE_OFFSET
    lmq_offset_skip_topics: tuple[str, ...]
    batch_cq: bool  # queue.type=BatchCQ topics go to batchconsumequeue/ (5.0.0+)
    schedule_tagscode_quirk: bool  # crash recovery may write the TAGS hash into SCHEDULE_TOPIC_XXXX (4.x)
    recover_normal: str  # CommitLog.recoverNormally's start segment rule
    recover_crash: str  # CommitLog.recoverAbnormally's start segment rule
    recover_max_num: bool  # commitLogRecoverMaxNum bounds how many segments the start search looks at (5.5.0+)
    reput_after_normal: bool  # recoverNormally dispatches nothing; the reput service does, from the CQs' max (4.x)
    #: LMQ offsets that repeat or leave one out are the broker's own, and its file ConsumeQueue writes each LMQ unit at
    #: the queue's write position (storelib.formats.consumequeue.QueueFiles ``at_write_position``): the rows whose
    #: broker's %LMQ% files showed it (5.0.0+: offsets assigned under the source queue's lock only)
    lmq_at_write_position: bool

    @property
    def verified(self) -> bool:
        return bool(self.verified_by)

    def lmq_source_allowed(self, topic: str) -> bool:
        """Whether records of ``topic`` are multi-dispatched to LMQ queues at all."""
        return (
            self.multi_dispatch
            and topic not in self.lmq_skip_source_topics
            and not topic.startswith(self.lmq_skip_source_prefixes)
        )

    def lmq_offsets_given(self, topic: str) -> bool:
        """Whether this release's append gives records of ``topic`` INNER_MULTI_QUEUE_OFFSET."""
        return (
            self.multi_dispatch
            and topic not in self.lmq_offset_skip_topics
            and not topic.startswith(self.lmq_offset_skip_prefixes)
        )

    @property
    def recovery(self) -> tuple[str, str, bool, bool]:
        return self.recover_normal, self.recover_crash, self.recover_max_num, self.reput_after_normal

    @property
    def verified_text(self) -> str:
        """ "verified by the 5.3.3 broker's files" or "UNVERIFIED: no broker of these releases checked it"."""
        if self.verified_by:
            return f"verified by the {', '.join(self.verified_by)} broker's files"
        return "UNVERIFIED: no broker of these releases checked this row"

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "first_release": version_text(self.first), "verified_by": list(self.verified_by)}


_TIMER, _SCHEDULE = TIMER_TOPIC, SCHEDULE_TOPIC
_RETRY, _DLQ, _SYS = "%RETRY%", "%DLQ%", "rmq_sys_"
#: the first row, 4.0.0 (4.3.2 is the oldest release Maven Central serves whole here)
_FIRST_ROW = RuleSet(
    name="4.0",
    first=FIRST,
    verified_by=("4.3.2", "4.5.2", "4.7.0"),
    properties_split_pairs=True,
    hash_slot_every_put=True,
    multi_dispatch=False,
    index_tag_keys=False,
    lmq_names_need_prefix=False,
    lmq_skip_source_prefixes=(),
    lmq_skip_source_topics=(),
    lmq_skip_path_names=False,
    lmq_offset_skip_prefixes=(),
    lmq_offset_skip_topics=(),
    batch_cq=False,
    schedule_tagscode_quirk=True,
    recover_normal=THIRD_LAST,
    recover_crash=TIMESTAMP,
    recover_max_num=False,
    reput_after_normal=True,
    lmq_at_write_position=False,
)
#: what each row changes from the one before it (name, first release, the real brokers that verified it, changes);
#: the jar facts behind each change: tests/broker/FACTS.md
_CHANGES: tuple[tuple[str, Version, tuple[str, ...], dict[str, object]], ...] = (
    ("4.7.1", (4, 7, 1), ("4.7.1", "4.8.0", "4.9.0"), {"hash_slot_every_put": False}),
    ("4.9.1", (4, 9, 1), ("4.9.1", "4.9.2"), {"properties_split_pairs": False}),
    ("4.9.3", (4, 9, 3), ("4.9.3", "4.9.7"), {"multi_dispatch": True}),
    (
        "5.0",
        (5, 0, 0),
        ("5.0.0", "5.1.0"),
        {
            "lmq_names_need_prefix": True,
            "batch_cq": True,
            "schedule_tagscode_quirk": False,
            "reput_after_normal": False,
            "lmq_at_write_position": True,
        },
    ),
    (
        "5.1.1",
        (5, 1, 1),
        ("5.1.1",),
        {"lmq_skip_source_prefixes": (_RETRY,), "lmq_offset_skip_prefixes": (_RETRY,)},
    ),
    (
        "5.1.2",
        (5, 1, 2),
        ("5.1.3", "5.1.4"),
        {
            "lmq_skip_source_topics": (_TIMER, _SCHEDULE),
            "lmq_skip_path_names": True,
            "lmq_offset_skip_topics": (_TIMER, _SCHEDULE),
        },
    ),
    (
        "5.2",
        (5, 2, 0),
        ("5.2.0", "5.3.0"),
        {
            "lmq_skip_source_prefixes": (_RETRY, _SYS),
            "lmq_skip_source_topics": (_SCHEDULE,),
            "lmq_offset_skip_topics": (),
        },
    ),
    (
        "5.3.1",
        (5, 3, 1),
        ("5.3.1",),
        {
            "lmq_offset_skip_prefixes": (_RETRY, _SYS),
            "lmq_offset_skip_topics": (_SCHEDULE,),
            "lmq_at_write_position": False,
        },
    ),
    ("5.3.2", (5, 3, 2), ("5.3.2", "5.3.3"), {"recover_normal": CQ_OFFSET}),
    ("5.4", (5, 4, 0), ("5.4.0",), {"index_tag_keys": True}),
    (
        "5.5",
        (5, 5, 0),
        ("5.5.0",),
        {
            "recover_normal": MATCHED,
            "recover_crash": MATCHED,
            "recover_max_num": True,
            "lmq_offset_skip_prefixes": (_RETRY, _DLQ, _SYS),
        },
    ),
)


def _rule_sets() -> tuple[RuleSet, ...]:
    rows = [_FIRST_ROW]
    for name, first, verified_by, changes in _CHANGES:
        rows.append(dataclasses.replace(rows[-1], name=name, first=first, verified_by=verified_by, **changes))  # type: ignore[arg-type]  # RuleSet fields
    return tuple(rows)


#: the release table, oldest row first
RULE_SETS = _rule_sets()


def parse_version(text: str) -> Version:
    """``4.9``, ``5.3.3``, ``5.5.0`` -> (major, minor, patch); a missing patch is 0."""
    m = _VERSION.match(text.strip())
    if not m:
        raise ConfigError(f"broker version {text!r}: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, e.g. 5.5 or 4.9.8")
    return int(m[1]), int(m[2]), int(m[3] or 0)


def version_text(v: Version | None) -> str | None:
    """(5, 5, 0) -> "5.5.0"."""
    return ".".join(map(str, v)) if v else None


def rules_for(version: str | Version) -> RuleSet:
    """The row of a broker release; releases before 4.0 or from 6.0 on are refused (not covered)."""
    v = parse_version(version) if isinstance(version, str) else version
    if not FIRST <= v < END:
        raise ConfigError(f"broker version {'.'.join(map(str, v))} is not supported (4.x and 5.x are)")
    return [r for r in RULE_SETS if r.first <= v][-1]
