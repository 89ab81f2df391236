"""Store names and paths: the one place that says what a file or directory of a store is called.

A store root holds ``commitlog/<20-digit start offset>``, ``consumequeue/<topic>/<queueId>/<20-digit
logical offset>``, ``index/<yyyyMMddHHmmssSSS>``, ``checkpoint``, ``abort`` and ``lock``. A DLedger store
(``enableDLegerCommitLog``) keeps its log in ``dledger-<selfId>/data/<20-digit start offset>`` instead, with
``dledger-<selfId>/index/`` (one 32-byte unit per entry) and ``dledger-<selfId>/checkpoint``; a store switched
from file mode keeps its old ``commitlog/`` below the DLedger data (``DLedgerConfig.getDataStorePath``). Names are ASCII
digits only (``str.isdigit`` also accepts '²' and other scripts' digits, which the broker never writes).
"""

from __future__ import annotations

import datetime
import posixpath
import re

from storelib.constants import INT32_MAX, TOPIC_MAX_LENGTH
from storelib.errors import HostileNameError

COMMITLOG = "commitlog"
CONSUMEQUEUE = "consumequeue"
BATCH_CONSUMEQUEUE = "batchconsumequeue"  # 5.0+
INDEX = "index"
CHECKPOINT = "checkpoint"
ABORT = "abort"
LOCK = "lock"
DLEDGER_PREFIX = "dledger-"
DLEDGER_DATA = "data"
DLEDGER_INDEX = "index"
DLEDGER_CHECKPOINT = "checkpoint"

OFFSET_NAME_DIGITS = 20  # commitlog and ConsumeQueue files: 20-digit zero-padded offset
_OFFSET_NAME = re.compile(r"[0-9]{20}\Z")
_INDEX_NAME = re.compile(r"[0-9]{17}\Z")  # yyyyMMddHHmmssSSS, the file's creation time
_QUEUE_ID = re.compile(r"(0|[1-9][0-9]{0,9})\Z")
_TOPIC = re.compile(r"[%|a-zA-Z0-9_-]+\Z")


def offset_file_name(offset: int) -> str:
    """A commitlog or ConsumeQueue file name: its start offset as 20 digits."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def parse_offset_name(name: str) -> int | None:
    """The start offset a commitlog or ConsumeQueue file name stands for, None when it is not such a name."""
    return int(name) if _OFFSET_NAME.match(name) else None


def is_index_name(name: str) -> bool:
    return bool(_INDEX_NAME.match(name))


def parse_queue_id(name: str) -> int | None:
    """A queueId directory name: a decimal int32 written without leading zeros, else None."""
    if not _QUEUE_ID.match(name) or int(name) > INT32_MAX:
        return None
    return int(name)


def is_valid_topic(topic: str) -> bool:
    """``TopicValidator``'s characters ``[%|a-zA-Z0-9_-]``, 1..255 of them.

    Only ASCII is allowed, so characters are bytes and 255 is the filesystem's NAME_MAX;
    topics over 127 characters are those the v2 record layout exists for.
    """
    return bool(_TOPIC.match(topic)) and len(topic) <= TOPIC_MAX_LENGTH


def validate_topic(topic: str, where: str = "") -> str:
    """The topic, when it is a legal name; anything else never becomes a path."""
    if not is_valid_topic(topic):
        raise HostileNameError(
            f"illegal topic name {topic!r} (RocketMQ allows [%|a-zA-Z0-9_-], at most {TOPIC_MAX_LENGTH} characters)",
            where,
        )
    return topic


def queue_dir(topic: str, queue_id: int, root: str = CONSUMEQUEUE) -> str:
    """``consumequeue/<topic>/<queueId>`` (or under ``root``, e.g. batchconsumequeue/) relative path, after
    validating both parts."""
    validate_topic(topic)
    if not 0 <= queue_id <= INT32_MAX:
        raise HostileNameError(f"illegal queueId {queue_id} for topic {topic!r}")
    return f"{root}/{topic}/{queue_id}"


def commitlog_file(name: str) -> str:
    return f"{COMMITLOG}/{name}"


def is_dledger_dir(name: str) -> bool:
    """``dledger-<selfId>``: the directory of one DLedger node's log under the store root."""
    return name.startswith(DLEDGER_PREFIX) and len(name) > len(DLEDGER_PREFIX)


def segment_dirs(root_entries: list[str]) -> list[str]:
    """The store-relative directories holding log segments, lowest offsets first: ``commitlog/`` (file mode, or
    the old log below a DLedger store's ``dividedCommitlogOffset``), then each ``dledger-<selfId>/data``."""
    dledger = sorted(f"{name}/{DLEDGER_DATA}" for name in root_entries if is_dledger_dir(name))
    return [COMMITLOG, *dledger] if COMMITLOG in root_entries or not dledger else dledger


def dledger_file(data_dir: str, *names: str) -> str:
    """A file of the DLedger node whose data directory is ``data_dir``: ``dledger_file(d, "index", name)``,
    ``dledger_file(d, "checkpoint")``."""
    return "/".join((posixpath.dirname(data_dir), *names))


def is_dledger_data(directory: str) -> bool:
    """Whether segments in ``directory`` (store-relative) are DLedger data files."""
    return directory != COMMITLOG


def index_file(name: str) -> str:
    return f"{INDEX}/{name}"


def offset_layout_problems(starts: list[int], file_size: int) -> list[tuple[str, int, int]]:
    """Where ascending offset-named files (commitlog segments, one queue's ConsumeQueue files) break
    the layout: ("misaligned", start, 0) for a start that is not a multiple of ``file_size``, and
    ("gap", start, expected) when the files from ``expected`` up to ``start`` are missing."""
    out: list[tuple[str, int, int]] = []
    expected = None
    for start in starts:
        if start % file_size:
            out.append(("misaligned", start, 0))
        if expected is not None and start != expected:
            out.append(("gap", start, expected))
        expected = start + file_size
    return out


def index_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` (UTC) of a time in ms since the epoch."""
    t = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return t.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def index_name_ms(name: str) -> int:
    """The time in ms an IndexFile name stands for (UTC)."""
    t = datetime.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=datetime.UTC)
    return int(t.timestamp()) * 1000 + int(name[14:])


def index_name_after(ms: int, previous: str | None) -> str:
    """The name for a file whose time is ``ms``, moved 1 ms past ``previous`` when not after it (load order)."""
    if previous is not None and ms <= index_name_ms(previous):
        ms = index_name_ms(previous) + 1
    return index_name(ms)


def deterministic_index_names(first_timestamps: list[int]) -> list[str]:
    """Rebuilt IndexFile names: each file's first entry's store time, kept strictly ascending.

    The broker names a file by its wall-clock creation time, which the data cannot reproduce; this rule
    gives the same names for the same data, sorted in the order the broker loads them.
    """
    names: list[str] = []
    for ts in first_timestamps:
        names.append(index_name_after(ts, names[-1] if names else None))
    return names


def inside(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both already normalised or resolved the same way)."""
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def is_local(store: str) -> bool:
    """A store on this host's filesystem: a plain path or a ``file://`` URI (recover changes only these)."""
    return "://" not in store or store.startswith("file://")
