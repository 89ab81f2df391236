"""The broker's own properties file (``broker.conf``): the settings that shape store files.

Java ``Properties`` syntax: ``key=value`` or ``key: value``, ``#``/``!`` comments,
backslash line continuations. Settings the file does not set take the 4.9.x defaults.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from storelib.constants import CQ_STORE_UNIT_SIZE
from storelib.errors import ConfigError

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_TIME_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LINE_END = re.compile(r"\r\n|\r|\n")  # Properties.load's line terminators (str.splitlines knows more)
_BLANKS = " \t\f"  # Properties.load's white space (str.isspace knows more)


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
    for name in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name} must be positive, got {getattr(cfg, name)}")
    if cfg.maxIndexNum < 2:
        raise ConfigError("maxIndexNum must be at least 2 (entry 0 of an IndexFile is never used)")
    if cfg.hashSlotCountRule not in ("occupied", "every-put"):
        raise ConfigError("hashSlotCountRule must be 'occupied' or 'every-put'")
    cfg.delay_levels_ms  # noqa: B018 - raises on an unreadable messageDelayLevel


def load_broker_config(path: str | Path | None) -> BrokerConfig:
    """Read a broker properties file; ``None`` gives the defaults."""
    if path is None:
        return BrokerConfig()
    try:
        text = Path(path).read_text(encoding="latin-1")
    except OSError as exc:
        raise ConfigError(f"cannot read broker config {path}: {exc.strerror}") from None
    try:
        return broker_config_from_properties(parse_properties(text))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
