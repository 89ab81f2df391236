"""The broker's own properties file (``broker.conf``): the settings that shape store files.

Java ``Properties`` syntax: ``key=value`` or ``key: value``, ``#``/``!`` comments,
backslash line continuations. Settings the file does not set take the 4.9.x defaults.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from storelib.constants import CQ_STORE_UNIT_SIZE, INDEX_ENTRY_SIZE, INDEX_HASH_SLOT_SIZE, INDEX_HEADER_SIZE
from storelib.errors import ConfigError

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_TIME_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LINE_END = re.compile(r"\r\n|\r|\n")  # Properties.load's line terminators (str.splitlines knows more)
_BLANKS = " \t\f"  # Properties.load's white space (str.isspace knows more)
#: the settings are Java ints; a store file is one MappedByteBuffer, at most Integer.MAX_VALUE bytes
JAVA_INT_MAX = 0x7FFFFFFF
#: a broker.conf is a few KB; more than this is not one (and /dev/zero never ends)
MAX_CONFIG_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """Store settings, named as in ``MessageStoreConfig``."""

    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300_000 * CQ_STORE_UNIT_SIZE
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    messageIndexEnable: bool = True
    enableConsumeQueueExt: bool = False
    checkCRCOnRecover: bool = True
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    #: hashSlotCount rule: "occupied" (current brokers) or "every-put" (very old brokers)
    hashSlotCountRule: str = "occupied"

    @property
    def cq_file_size(self) -> int:
        """ConsumeQueue file size, rounded up to a multiple of 20 as ``ConsumeQueue`` does."""
        size = self.mappedFileSizeConsumeQueue
        return -(-size // CQ_STORE_UNIT_SIZE) * CQ_STORE_UNIT_SIZE

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        """Delay of each level (level 1 first), in ms, parsed as ``ScheduleMessageService`` does."""
        return parse_delay_levels(self.messageDelayLevel)

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    levels = []
    for word in text.split():
        unit = word[-1:]
        if unit not in _TIME_UNITS_MS or not word[:-1].isdigit():
            raise ConfigError(f"messageDelayLevel: cannot read level {word!r}")
        levels.append(int(word[:-1]) * _TIME_UNITS_MS[unit])
    return tuple(levels)


def parse_properties(text: str) -> dict[str, str]:
    """Java ``Properties.load`` for the subset brokers use (no unicode escapes in keys)."""
    out: dict[str, str] = {}
    logical = ""
    for raw in _LINE_END.split(text):
        line = raw.lstrip(_BLANKS)
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split_property(logical)
        out[key] = value
    return out


def _split_property(line: str) -> tuple[str, str]:
    """Key ends at the first ``=``, ``:`` or blank; one ``=``/``:`` after blanks is skipped."""
    i = 0
    while i < len(line) and line[i] not in "=:" + _BLANKS:
        i += 1
    rest = line[i:].lstrip(_BLANKS)
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(_BLANKS)
    return line[:i], rest.rstrip(_BLANKS)


def _coerce(field: dataclasses.Field, name: str, value: str) -> object:
    if field.type in ("int", int):
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{name}={value!r} is not an integer") from None
    if field.type in ("bool", bool):
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{name}={value!r} is not true or false")
        return value.lower() == "true"
    return value


def broker_config_from_properties(props: dict[str, str]) -> BrokerConfig:
    """Take the settings BrokerConfig knows; everything else in the file is ignored."""
    fields = {f.name: f for f in dataclasses.fields(BrokerConfig)}
    kwargs = {name: _coerce(fields[name], name, value) for name, value in props.items() if name in fields}
    cfg = BrokerConfig(**kwargs)
    validate(cfg)
    return cfg


def validate(cfg: BrokerConfig) -> None:
    """The broker's own limits: positive Java ints, and every store file within one MappedByteBuffer."""
    for name in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum"):
        if not 0 < getattr(cfg, name) <= JAVA_INT_MAX:
            raise ConfigError(f"{name} must be between 1 and {JAVA_INT_MAX} (a Java int), got {getattr(cfg, name)}")
    if cfg.maxIndexNum < 2:
        raise ConfigError("maxIndexNum must be at least 2 (entry 0 of an IndexFile is never used)")
    if cfg.cq_file_size > JAVA_INT_MAX:
        raise ConfigError(f"mappedFileSizeConsumeQueue {cfg.mappedFileSizeConsumeQueue} is over {JAVA_INT_MAX} bytes")
    index_size = INDEX_HEADER_SIZE + cfg.maxHashSlotNum * INDEX_HASH_SLOT_SIZE + cfg.maxIndexNum * INDEX_ENTRY_SIZE
    if index_size > JAVA_INT_MAX:
        raise ConfigError(
            f"an IndexFile of maxHashSlotNum {cfg.maxHashSlotNum} and maxIndexNum {cfg.maxIndexNum} would be "
            f"{index_size:,} bytes: the broker maps it in one buffer of at most {JAVA_INT_MAX:,} bytes"
        )
    if cfg.hashSlotCountRule not in ("occupied", "every-put"):
        raise ConfigError("hashSlotCountRule must be 'occupied' or 'every-put'")
    cfg.delay_levels_ms  # noqa: B018 - raises on an unreadable messageDelayLevel


def load_broker_config(path: str | Path | None) -> BrokerConfig:
    """Read a broker properties file; ``None`` gives the defaults."""
    return _broker_config(read_properties(path), path) if path is not None else BrokerConfig()


def _broker_config(props: dict[str, str], path: str | Path | None) -> BrokerConfig:
    try:
        return broker_config_from_properties(props)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}" if path is not None else str(exc)) from None


def read_properties(path: str | Path) -> dict[str, str]:
    """The properties of a broker config file: at most MAX_CONFIG_BYTES, never a device (``/dev/zero``)."""
    try:
        mode = os.stat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise ConfigError(f"broker config {path} is not a regular file")
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read broker config {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"broker config {path} is over {MAX_CONFIG_BYTES:,} bytes: not a properties file")
    return parse_properties(data.decode("latin-1"))


def segment_size_of(sizes: Iterable[int]) -> int | None:
    """The segment size the commitlog files show: the most common size, the larger on a tie (only damage makes a
    segment shorter); None without files."""
    counts = collections.Counter(sizes)
    return max(counts, key=lambda size: (counts[size], size)) if counts else None


def load_store_config(path: str | Path | None, segment_sizes: Iterable[int]) -> tuple[BrokerConfig, str | None]:
    """The broker config of a store whose commitlog segments have ``segment_sizes``, and a note on their size.

    Every segment file of a store is mappedFileSizeCommitLog bytes (preallocated). A config that does not set it
    takes it from the files (the note says so); one that sets it otherwise is kept, and the note names the
    contradiction.
    """
    props = read_properties(path) if path is not None else {}
    cfg = _broker_config(props, path)
    size = segment_size_of(segment_sizes)
    if size is None or size == cfg.mappedFileSizeCommitLog:
        return cfg, None
    if "mappedFileSizeCommitLog" in props:
        return cfg, (
            f"mappedFileSizeCommitLog is {cfg.mappedFileSizeCommitLog} in {path}, but the segment files are "
            f"{size} bytes: the config contradicts the store"
        )
    cfg = dataclasses.replace(cfg, mappedFileSizeCommitLog=size)
    validate(cfg)
    where = f"in {path}" if path is not None else "(no --broker-config)"
    return cfg, f"mappedFileSizeCommitLog is not set {where}: {size} bytes, read off the segment files"
