"""Two stores of one broker compared message by message (``rmqstore diff``): which records one holds and the other
lacks, and which are at different queue offsets. The use: after a failover, the messages the old master stored
(and acknowledged) that the promoted slave never received.

What counts as one message in both stores:

- a record's **message key** is its topic and UNIQ_KEY property: the id the producer gave it
  (``MessageClientIDSetter``), which the broker stores as sent, which a slave's copy holds byte for byte, and which
  a producer's retry of the same message keeps. The topic is part of it: the broker writes one message under one
  UNIQ_KEY to several topics (a delayed message to SCHEDULE_TOPIC_XXXX and then to its topic, a transaction's half
  and op records, a consumer's retries to %RETRY% and %DLQ%: the 4.9.8 sample store holds all of these). A record
  without one (a client that sets none, a record the broker wrote itself) is keyed by what its bytes say of it:
  topic, BORNTIMESTAMP, BODYCRC and TOTALSIZE;
- where the logs share a prefix (a slave's commitlog is a byte copy of its master's up to the point it
  replicated), records at the same commitlog offset with the same key, TOTALSIZE and STORETIMESTAMP are one
  record (**same place**);
- records not paired so are paired by key, the k-th of a key in one store with its k-th in the other, in
  commitlog order (**moved**: the logs went their own ways, the same message written at another place);
- a record left over is **missing** from the other store: it holds that message fewer times (a retry topic's
  later records of a message, a producer's retry), or not at all;
- paired records whose topic, queue id or queue offset differ are **at different queue offsets**.

Spark-free: ``with_message_keys`` and ``compare`` work on Arrow tables (the job runs them on executors, every
record of a key in the same task); the report's figures are ``DiffCounts``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: the two stores, as ``side`` says: the first named, the other
FIRST, OTHER = 0, 1
#: what a DIFF_SCHEMA row says of its record
MISSING, QUEUE_OFFSET = "missing", "queue-offset"
KINDS = (MISSING, QUEUE_OFFSET)

#: the columns a record is compared by (from udfs.schema.MESSAGE_SCHEMA), and ``side``
RECORD_SCHEMA = pa.schema(
    [
        ("side", pa.int8()),
        ("segment", pa.string()),
        ("commitlog_offset", pa.int64()),
        ("size", pa.int32()),
        ("topic", pa.string()),
        ("queue_id", pa.int32()),
        ("queue_offset", pa.int64()),
        ("sys_flag", pa.int32()),
        ("tags", pa.string()),
        ("keys", pa.string()),
        ("uniq_key", pa.string()),
        ("born_timestamp", pa.int64()),
        ("store_timestamp", pa.int64()),
        ("body_crc", pa.int32()),
    ]
)
KEYED_SCHEMA = RECORD_SCHEMA.append(pa.field("key", pa.string()))
#: one row per record one store holds that the other does not hold at that place: what (``kind``), which store
#: holds it (``side``), the record, and its partner's place in the other store (queue-offset rows only)
DIFF_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        *RECORD_SCHEMA,
        ("other_commitlog_offset", pa.int64()),
        ("other_topic", pa.string()),
        ("other_queue_id", pa.int32()),
        ("other_queue_offset", pa.int64()),
    ]
)
#: the fields that make two records at one commitlog offset the same record
SAME_PLACE = ("commitlog_offset", "key", "size", "store_timestamp")
#: a record's place in its queue
QUEUE_PLACE = ("topic", "queue_id", "queue_offset")


def with_message_keys(records: pa.Table | pa.RecordBatch) -> pa.Table:
    """``records`` (RECORD_SCHEMA) with each record's message key: ``topic|UNIQ_KEY``, else
    ``topic|born|crc|size``."""
    table = pa.Table.from_batches([records]) if isinstance(records, pa.RecordBatch) else records
    parts = [pc.cast(table[c], pa.string()) for c in ("born_timestamp", "body_crc", "size")]
    content = pc.binary_join_element_wise(*parts, "|")
    topic = pc.fill_null(table["topic"], "")
    key = pc.binary_join_element_wise(topic, pc.if_else(pc.is_null(table["uniq_key"]), content, table["uniq_key"]), "|")
    return table.append_column("key", key)


def compare(records: pa.Table) -> pa.Table:
    """DIFF_SCHEMA rows of ``records`` (KEYED_SCHEMA, both stores' records, every record of a key present)."""
    table = records.append_column("row", pa.array(np.arange(len(records), dtype=np.int64)))
    first, other = _sides(table)
    same_place = first.join(other, list(SAME_PLACE), join_type="inner", right_suffix="_o", use_threads=False)
    placed = np.concatenate([same_place["row"].to_numpy(), same_place["row_o"].to_numpy()])
    rest = table.filter(pa.array(~np.isin(np.arange(len(table)), placed)))
    first, other = _sides(_ranked(rest))
    moved = first.join(other, ["key", "rank"], join_type="inner", right_suffix="_o", use_threads=False)
    paired = np.concatenate([moved["row"].to_numpy(), moved["row_o"].to_numpy()])
    left = rest.filter(pa.array(~np.isin(rest["row"].to_numpy(), paired)))
    return pa.concat_tables(
        [
            _diff_rows(left, pa.array([MISSING] * len(left), pa.string()), None),
            _queue_moves(same_place),
            _queue_moves(moved),
        ],
        promote_options="none",
    ).combine_chunks()


def _sides(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    side = table["side"].to_numpy(zero_copy_only=False)
    return table.filter(pa.array(side == FIRST)), table.filter(pa.array(side == OTHER))


def _ranked(table: pa.Table) -> pa.Table:
    """``table`` with ``rank``: a record's place among the records of its key in its store, in commitlog order."""
    order = pc.sort_indices(table, [("side", "ascending"), ("key", "ascending"), ("commitlog_offset", "ascending")])
    table = table.take(order)
    side = table["side"].to_numpy(zero_copy_only=False)
    key = pc.dictionary_encode(table["key"]).combine_chunks().indices.to_numpy(zero_copy_only=False)
    n = len(table)
    starts = np.flatnonzero(np.r_[True, (side[1:] != side[:-1]) | (key[1:] != key[:-1])]) if n else np.array([], int)
    rank = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    return table.append_column("rank", pa.array(rank, pa.int64()))


def _queue_moves(pairs: pa.Table) -> pa.Table:
    """Pairs (one record of each store) at different queue places: a row for the first store's record."""
    differ = pc.or_kleene(
        pc.or_kleene(
            pc.not_equal(pairs["topic"], pairs["topic_o"]), pc.not_equal(pairs["queue_id"], pairs["queue_id_o"])
        ),
        pc.not_equal(pairs["queue_offset"], pairs["queue_offset_o"]),
    )
    moved = pairs.filter(differ)
    return _diff_rows(moved, pa.array([QUEUE_OFFSET] * len(moved), pa.string()), moved)


def _diff_rows(records: pa.Table, kind: pa.Array, partners: pa.Table | None) -> pa.Table:
    n = len(records)

    def other(name: str) -> pa.Array | pa.ChunkedArray:
        typ = DIFF_SCHEMA.field(f"other_{name}").type
        if partners is None:
            return pa.nulls(n, typ)
        column = f"{name}_o" if f"{name}_o" in partners.column_names else name  # a join key has one column
        return partners[column].cast(typ)

    cols: dict[str, Any] = {"kind": kind, **{f.name: records[f.name].cast(f.type) for f in RECORD_SCHEMA}}
    cols |= {f"other_{c}": other(c) for c in ("commitlog_offset", "topic", "queue_id", "queue_offset")}
    return pa.table({f.name: cols[f.name] for f in DIFF_SCHEMA}, schema=DIFF_SCHEMA)


@dataclasses.dataclass(frozen=True)
class DiffCounts:
    """The figures of a diff: records of each store, and of each kind by store (DIFF_SCHEMA rows counted)."""

    records: tuple[int, int]
    kinds: Mapping[str, tuple[int, int]]

    @classmethod
    def of(cls, records: tuple[int, int], counted: Iterable[tuple[str, int, int]]) -> DiffCounts:
        """From (kind, side, rows) counts."""
        kinds = {k: [0, 0] for k in KINDS}
        for kind, side, rows in counted:
            kinds[kind][side] += rows
        return cls(records, {k: (v[0], v[1]) for k, v in kinds.items()})

    @property
    def paired(self) -> tuple[int, int]:
        """Records of each store that the other holds at a place of their own (same place or moved)."""
        return tuple(  # type: ignore[return-value]
            self.records[s] - self.kinds[MISSING][s] for s in (FIRST, OTHER)
        )

    @property
    def same(self) -> bool:
        """Every message of each store is in the other, once, at the same queue offset."""
        return not any(any(v) for v in self.kinds.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": list(self.records),
            "paired": list(self.paired),
            **{k.replace("-", "_"): list(v) for k, v in self.kinds.items()},
        }


@dataclasses.dataclass(frozen=True)
class DiffGroup:
    """DIFF_SCHEMA rows of one kind, store and topic, counted: report.json's ``groups``."""

    kind: str
    side: int
    topic: str
    records: int
    bytes: int
    first_commitlog_offset: int
    last_commitlog_offset: int
    first_store_timestamp: int
    last_store_timestamp: int

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> DiffGroup:
        return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})


def diff_report(stores: tuple[str, str], counts: DiffCounts, groups: Iterable[DiffGroup], out: str | None) -> dict:
    """report.json of a diff: the stores (``side`` 0 and 1), the figures, the groups, where the missing messages
    went, and the verdict (``same``: exit 0)."""
    return {
        "stores": list(stores),
        "same": counts.same,
        "counts": counts.to_dict(),
        "groups": [dataclasses.asdict(g) for g in sorted(groups, key=lambda g: (g.kind, g.side, g.topic))],
        "missing_messages": out,
    }
