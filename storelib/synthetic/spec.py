"""What the store generator is to write (``GeneratorSpec``), its named presets (``PRESETS``: the demo, the bench's
workloads), and what it wrote (``GenerateSummary``): storelib.synthetic.generator writes it."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GeneratorSpec:
    """What to generate. Stops at ``messages`` records or ``target_bytes`` of commitlog, whichever comes first."""

    messages: int | None = 20_000
    target_bytes: int | None = None
    topics: int = 4
    queues_per_topic: int = 4
    body_size: tuple[int, int] = (16, 512)  # inclusive range; (n, n) for a fixed size
    max_keys: int = 3  # KEYS holds 1..max_keys keys
    keyed_fraction: float = 0.8
    tagged_fraction: float = 0.85
    uniq_key_fraction: float = 0.9
    multibyte_fraction: float = 0.1  # tags, keys and user property values with non-ASCII characters
    odd_keys_fraction: float = 0.03  # KEYS with a double or a trailing space (an empty key in the collection)
    ipv6_fraction: float = 0.05  # born hosts and store hosts, each drawn on its own
    delay_fraction: float = 0.03
    transaction_fraction: float = 0.03  # half messages, later committed or rolled back
    legacy_transaction_fraction: float = 0.01  # PREPARED records, later COMMIT or ROLLBACK records
    long_topic: bool = False  # also send to LONG_TOPIC (150 characters: v2 records)
    deleted_head_segments: int = 0  # retention: delete the first k segments (never the last one)
    seed: int = 0
    start_timestamp: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z

    def __post_init__(self) -> None:
        if self.messages is None and self.target_bytes is None:
            raise ValueError("give a message count or a target size")
        if self.messages is not None and self.messages < 0:
            raise ValueError("the message count cannot be negative")
        if self.target_bytes is not None and self.target_bytes <= 0:
            raise ValueError("the target size must be positive")
        lo, hi = self.body_size
        if not 0 <= lo <= hi:
            raise ValueError(f"body size range {lo}-{hi} is not valid")
        if self.topics < 1 or self.queues_per_topic < 1 or self.max_keys < 1:
            raise ValueError("topics, queues per topic and max keys must be at least 1")
        if self.deleted_head_segments < 0:
            raise ValueError("deleted head segments cannot be negative")
        for f in dataclasses.fields(self):
            if f.name.endswith("_fraction") and not 0.0 <= getattr(self, f.name) <= 1.0:
                raise ValueError(f"{f.name} must be between 0 and 1")
        if self.delay_fraction + self.transaction_fraction + self.legacy_transaction_fraction > 1.0:
            raise ValueError("delay, transaction and legacy transaction fractions add up to more than 1")


@dataclasses.dataclass(frozen=True)
class GenerateSummary:
    """What generate_store wrote."""

    messages: int  # message records written (BLANKs not counted), deleted segments included
    segments: int  # commitlog segments left on disk
    deleted_segments: int
    bytes: int  # commitlog bytes written (the max physical offset), deleted segments included
    blanks: int
    queues: int  # ConsumeQueue directories written
    cq_files: int
    index_files: int
    index_entries: int
    seconds: float
    kinds: dict[str, int]  # records per kind: send, delay, delivered, half, commit, op, prepared, ...

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Preset:
    """Generator defaults and the broker settings they are meant for."""

    spec: GeneratorSpec
    broker: dict[str, str]  # broker settings (properties-file names and values) over the defaults


def _one_key_spec(body: int) -> GeneratorSpec:
    """Plain sends (no delays, no transactions) with a ``body``-byte body, one tag, one key and a UNIQ_KEY;
    4 topics x 8 queues, 1 GiB of commitlog."""
    return GeneratorSpec(
        messages=None,
        target_bytes=1 << 30,
        queues_per_topic=8,
        body_size=(body, body),
        max_keys=1,
        keyed_fraction=1.0,
        tagged_fraction=1.0,
        uniq_key_fraction=1.0,
        delay_fraction=0.0,
        transaction_fraction=0.0,
        legacy_transaction_fraction=0.0,
    )


PRESETS: dict[str, Preset] = {
    # several files of every kind, every feature, one expired head segment
    "demo": Preset(
        GeneratorSpec(messages=20_000, deleted_head_segments=1),
        {
            "mappedFileSizeCommitLog": str(1 << 20),
            "mappedFileSizeConsumeQueue": "6000",
            "maxHashSlotNum": "997",
            "maxIndexNum": "4000",
        },
    ),
    "bench-1k": Preset(
        GeneratorSpec(messages=None, target_bytes=1 << 30, queues_per_topic=8, body_size=(1024, 1024)), {}
    ),
    "bench-128": Preset(
        GeneratorSpec(messages=None, target_bytes=1 << 30, queues_per_topic=8, body_size=(128, 128)), {}
    ),
    # the bench workloads: 1 tag, 1 key + UNIQ_KEY per send, broker defaults (1 GiB segments)
    "bench-723": Preset(_one_key_spec(512), {}),  # ~723-byte records
    "bench-320": Preset(_one_key_spec(125), {}),  # ~320-byte records
    # the 4.9.8 sample's shape: ~14 MB in 64 KiB segments
    "bench-sample": Preset(
        GeneratorSpec(messages=None, target_bytes=14_000_000),
        {
            "mappedFileSizeCommitLog": str(64 << 10),
            "mappedFileSizeConsumeQueue": "8000",
            "maxHashSlotNum": "701",
            "maxIndexNum": "3000",
        },
    ),
}
