"""CommitLog segments as a whole: which files make up the log, and how to judge where each one's records stop.

Segments are named by their 20-digit start offset and are all ``mappedFileSizeCommitLog`` bytes. Before the
last segment holding messages only a BLANK (or records to the very end) is a normal end; after it, zero
tails are preallocated space and a torn record is the crash tail the broker would truncate. A memory-mapped
segment torn by a crash holds the first bytes of its last record and then the zeros of the preallocated file:
the scanner reports that record as a length mismatch and stops at the zeros; ``settle_torn_tail`` reads it as
the torn record it is. Before the last segment holding messages, records that stop with no record start after them
in their segment (``settle_damaged_ends``) are damage to the segment's end, like any other damaged range.

Damage to one record (a CRC or length mismatch, a bad delay level) loses at most that record: it never
stops or skips a segment.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import struct
import zlib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from storelib.broker.config import BrokerConfig
from storelib.broker.resync import DAMAGED_RECORDS, RESYNC_REASONS, DamagedMessage, Hole
from storelib.broker.rule_choice import RuleInputs
from storelib.constants import CRC32_POLYNOMIAL
from storelib.findings import KINDS, Finding, FindingFields, finding
from storelib.formats.dledger import ENTRY_INDEX, ENTRY_TERM
from storelib.formats.scanner import (
    COMMITLOG_FRAMING,
    DAMAGE_LENGTH,
    DLEDGER_FRAMING,
    END_BLANK,
    END_EOF,
    END_TORN,
    END_UNREADABLE,
    END_ZERO_TAIL,
    Framing,
)
from storelib.layout import COMMITLOG, is_dledger_data, offset_layout_problems, parse_offset_name


@dataclasses.dataclass(frozen=True)
class Segment:
    """One commitlog segment file (or DLedger data file): where to read it, its name, start offset, size, and the
    store-relative directory holding it."""

    uri: str
    name: str
    start: int
    size: int
    dir: str = COMMITLOG

    @property
    def rel(self) -> str:
        """The file, relative to the store root."""
        return f"{self.dir}/{self.name}"

    @property
    def framing(self) -> Framing:
        """Records one after the other, or each inside a DLedger entry."""
        return DLEDGER_FRAMING if is_dledger_data(self.dir) else COMMITLOG_FRAMING


@dataclasses.dataclass(frozen=True)
class Damage:
    """A record that failed a check (kind: crc-mismatch, length-mismatch, bad-delay-level), or bytes where records
    do not frame (damaged-records, up to ``end_offset``: storelib.broker.resync.Hole)."""

    kind: str
    commitlog_offset: int
    detail: str
    messages_after: int = 0  # message records of its segment at or after it (what a truncation there loses)
    end_offset: int | None = None  # damaged-records: the next sound record (or the end-of-file BLANK)
    messages: tuple[DamagedMessage, ...] = ()  # damaged-records: what is left of the messages whose headers it holds
    unlisted: int = 0  # damaged-records: further message headers in it

    @classmethod
    def of_hole(cls, hole: Hole) -> Damage:
        detail = f"the walk stopped there ({hole.reason}{': ' + hole.detail if hole.detail else ''})"
        return cls(DAMAGED_RECORDS, hole.start, detail, 0, hole.end, hole.messages, hole.unlisted)

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> Damage:
        messages = tuple(DamagedMessage(**m) for m in d.get("messages") or ())  # type: ignore[attr-defined]
        return cls(**{**d, "messages": messages})  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class SegmentSummary:
    """What a parse task says about one segment: where and why its records stop, counts and timestamps."""

    segment: str
    end_reason: str
    end_offset: int  # commitlog offset where the valid records end
    detail: str
    messages: int
    index_entries: int  # IndexFile entries the segment's records put
    first_store_timestamp: int  # of its first message, 0 when it has none
    last_store_timestamp: int
    last_cq_store_timestamp: int  # of its last ConsumeQueue-dispatched message
    last_message_offset: int  # -1 when it has no message
    worker_peak_rss: int  # bytes, the parsing Python worker's peak
    fingerprint: str  # of the records read: rebuilt-stale when a later parse of the segment differs
    damage: tuple[Damage, ...] = ()
    # DLedger data files: index and term of the first and last entry (-1: none)
    first_entry_index: int = -1
    first_entry_term: int = -1
    last_entry_index: int = -1
    last_entry_term: int = -1
    #: its records that the rule sets of different releases dispatch differently
    rule_inputs: RuleInputs = dataclasses.field(default_factory=RuleInputs)
    #: the same by stretch of a store several releases wrote (BrokerConfig.releaseStretches): (stretch, inputs)
    stretch_inputs: tuple[tuple[int, RuleInputs], ...] = ()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SegmentSummary:  # a JSON object or a Spark row
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in row.items() if k in fields}
        values["damage"] = tuple(Damage.from_dict(d) for d in row.get("damage") or ())
        values["rule_inputs"] = RuleInputs.from_dict(row.get("rule_inputs") or {})
        stretches = row.get("stretch_inputs") or ()
        values["stretch_inputs"] = tuple((int(k), RuleInputs.from_dict(d)) for k, d in stretches)
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> SegmentSummary:
        return cls.from_row(json.loads(text))

    def without_messages(self) -> SegmentSummary:
        """The summary of a segment left out of the index (``--on-error skip-segment``)."""
        return dataclasses.replace(self, messages=0, index_entries=0, last_message_offset=-1)


@dataclasses.dataclass(frozen=True)
class Piece:
    """The byte range [lo, hi) of one segment that one parse task reads: the records whose start lies in it.

    Piece 0 starts at the segment's first record; a later one at the first record at or after ``lo`` as the records
    tell it (``storelib.formats.scanner.find_record_start``), a guess that ``merge_pieces`` checks against the piece
    before. A segment parsed whole is its only piece, named as the segment."""

    segment: Segment
    lo: int
    hi: int
    number: int = 0
    count: int = 1

    @property
    def name(self) -> str:
        """The segment's name, and the piece's number when the segment has several (scratch file names)."""
        return self.segment.name if self.count == 1 else f"{self.segment.name}.{self.number:03d}"


#: the RecordBatch and Dispatch columns a segment's fingerprint covers, in order (``fingerprint``)
FINGERPRINT_COLUMNS = (
    "physical_offset",
    "total_size",
    "body_crc",
    "queue_id",
    "queue_offset",
    "sys_flag",
    "store_timestamp",
    "tags_code",
    "index_key_hash",
)


def fingerprint(columns: Iterable[tuple[int, int]], messages: int) -> str:
    """SegmentSummary.fingerprint from the (crc32, bytes) of each FINGERPRINT_COLUMNS column over the segment's
    records: one CRC per column, so batch and piece boundaries do not change it."""
    crcs = [crc for crc, _ in columns]
    return f"crc32:{zlib.crc32(struct.pack(f'>{len(crcs)}I', *crcs)):08x}:{messages}"


def _mult_mod_p(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC-32 polynomial, both reflected."""
    product, bit = 0, 1 << 31
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ CRC32_POLYNOMIAL if b & 1 else b >> 1  # b(x) * x
    return product


def _x_powers() -> list[int]:
    """x^(2^k) modulo the polynomial, k = 0 .. 63: each the square of the one before."""
    powers = [1 << 30]  # x^1
    for _ in range(63):
        powers.append(_mult_mod_p(powers[-1], powers[-1]))
    return powers


_X_POWERS = _x_powers()


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """zlib's ``crc32_combine``: the crc32 of A + B from crc32(A), crc32(B) and len(B): crc(A) shifted over
    len(B) zero bytes (times x^(8 len(B)), the product of x^(2^(k+3)) over the bits k of len(B)), plus crc(B)."""
    shift, k = 1 << 31, 3  # x^0
    while length2 > 0:
        if length2 & 1:
            shift = _mult_mod_p(_X_POWERS[k], shift)
        length2 >>= 1
        k += 1
    return _mult_mod_p(shift, crc1) ^ crc2


@dataclasses.dataclass(frozen=True)
class PieceSummary:
    """What one piece's task says: the SegmentSummary of its records alone (fingerprint and damage counts of
    them) and how it meets its neighbours: ``start`` (commitlog offset of its first record, None when it found
    none), ``handoff`` (of the first record at or after its end, which the next piece must start at; None when its
    records stop inside it), whether it holds a ConsumeQueue-dispatched record, and each fingerprinted column's
    (crc32, bytes)."""

    piece: str
    summary: SegmentSummary
    start: int | None
    handoff: int | None
    has_cq: bool
    columns: tuple[tuple[int, int], ...]

    def to_json(self) -> str:
        """The SegmentSummary's JSON (what a segment parsed whole leaves) with the piece's own fields beside it."""
        extra = {"start": self.start, "handoff": self.handoff, "has_cq": self.has_cq, "columns": self.columns}
        return json.dumps({**dataclasses.asdict(self.summary), "piece": {"name": self.piece, **extra}}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PieceSummary:
        row = json.loads(text)
        p = row.pop("piece")
        columns = tuple((int(c), int(n)) for c, n in p["columns"])
        return cls(p["name"], SegmentSummary.from_row(row), p["start"], p["handoff"], p["has_cq"], columns)


def merge_pieces(segment: Segment, pieces: list[PieceSummary]) -> SegmentSummary | None:
    """The segment's summary from its pieces' (in order), exactly what its parse whole gives (a segment parsed
    whole: its one piece's); None when the pieces do not meet: each must start where the one before handed off
    (piece 0 at the segment's start), one that found no record after one whose records stopped, and none
    unreadable. Then the whole parse decides."""
    if len(pieces) == 1:  # the segment parsed whole
        return pieces[0].summary
    expected: int | None = segment.start
    for p in pieces:
        if p.start != expected or p.summary.end_reason == END_UNREADABLE:
            return None
        expected = p.handoff
    if expected is not None:
        return None
    last = [p for p in pieces if p.start is not None][-1].summary
    with_messages = [p.summary for p in pieces if p.summary.messages]
    later = [*list(itertools.accumulate(p.summary.messages for p in reversed(pieces)))[::-1][1:], 0]
    damage = tuple(
        dataclasses.replace(d, messages_after=d.messages_after + after)
        for p, after in zip(pieces, later)
        for d in p.summary.damage
    )
    columns = []
    for k in range(len(pieces[0].columns)):
        crc, size = 0, 0
        for p in pieces:
            crc, size = crc32_combine(crc, p.columns[k][0], p.columns[k][1]), size + p.columns[k][1]
        columns.append((crc, size))
    with_cq = [p.summary for p in pieces if p.has_cq]
    messages = sum(p.summary.messages for p in pieces)
    return dataclasses.replace(
        last,
        segment=segment.name,
        messages=messages,
        index_entries=sum(p.summary.index_entries for p in pieces),
        first_store_timestamp=with_messages[0].first_store_timestamp if with_messages else 0,
        last_store_timestamp=with_messages[-1].last_store_timestamp if with_messages else 0,
        last_cq_store_timestamp=with_cq[-1].last_cq_store_timestamp if with_cq else 0,
        last_message_offset=with_messages[-1].last_message_offset if with_messages else -1,
        worker_peak_rss=max(p.summary.worker_peak_rss for p in pieces),
        fingerprint=fingerprint(columns, messages),
        damage=tuple(sorted(damage, key=lambda d: d.commitlog_offset)),
        rule_inputs=sum((p.summary.rule_inputs for p in pieces), RuleInputs()),
        stretch_inputs=by_stretch(p.summary.stretch_inputs for p in pieces),
    )


def by_stretch(parts: Iterable[tuple[tuple[int, RuleInputs], ...]]) -> tuple[tuple[int, RuleInputs], ...]:
    """Rule inputs of several pieces (or segments) summed by stretch."""
    total: dict[int, RuleInputs] = {}
    for part in parts:
        for k, inputs in part:
            total[k] = total.get(k, RuleInputs()) + inputs
    return tuple(sorted(total.items()))


@dataclasses.dataclass(frozen=True)
class ListedFile:
    """A file found in ``commitlog/`` (or a DLedger data directory, ``dir``): name, size and where to read it."""

    name: str
    size: int
    uri: str
    dir: str = COMMITLOG


def plan_segments(listed: Iterable[ListedFile], cfg: BrokerConfig) -> tuple[list[Segment], list[Finding]]:
    """The segments in offset order, and findings about stray names, gaps, misaligned names and sizes."""
    findings: list[Finding] = []
    segments: list[Segment] = []
    for f in listed:
        start = parse_offset_name(f.name)
        if start is None:
            findings.append(finding("stray-file", f"{f.dir}/{f.name}", "not a commitlog segment name; ignored"))
        else:
            segments.append(Segment(f.uri, f.name, start, f.size, f.dir))
    segments.sort(key=lambda s: s.start)
    findings += _layout_findings(segments, cfg.mappedFileSizeCommitLog)
    return segments, findings


def _layout_findings(segments: list[Segment], seg_size: int) -> list[Finding]:
    out = []
    rels = {s.start: s.rel for s in segments}
    for kind, start, expected in offset_layout_problems([s.start for s in segments], seg_size):
        rel = rels[start]
        if kind == "misaligned":
            message = f"start offset is not a multiple of mappedFileSizeCommitLog {seg_size}"
            out.append(finding("segment-misaligned", rel, message, commitlog_offset=start))
        else:
            message = (
                f"{(start - expected) // seg_size} segment(s) missing before this one: commitlog offsets "
                f"{expected} to {start} are not in the store"
            )
            out.append(finding("segment-gap", rel, message, commitlog_offset=expected, count=start - expected))
    for s in segments:
        if s.size != seg_size:
            out.append(
                finding(
                    "segment-size",
                    s.rel,
                    f"segment is {s.size} bytes, mappedFileSizeCommitLog is {seg_size}",
                    commitlog_offset=s.start,
                    expected=str(seg_size),
                    actual=str(s.size),
                )
            )
    return out


def settle_torn_tail(segments: list[Segment], summaries: Mapping[str, SegmentSummary]) -> dict[str, SegmentSummary]:
    """The summaries with a memory-mapped crash tail read as what it is: a torn record where it starts.

    The log's last written segment whose last record is a length mismatch, with no record after it and zeros after
    it, holds the first bytes of a record (TOTALSIZE and a few fields) written before the crash, followed by the
    preallocated file's zeros. Its records end there (``torn``; in a DLedger data file, at the entry holding it), and
    that record is not a damaged one; the broker's recovery truncates the log at the same place.
    """
    out = dict(summaries)
    written = [seg for seg in segments if summaries[seg.name].messages or summaries[seg.name].damage]
    s = summaries[written[-1].name] if written else None
    last = s.damage[-1] if s is not None and s.damage else None
    if s is None or last is None or last.kind != DAMAGE_LENGTH or s.end_reason not in (END_ZERO_TAIL, END_EOF):
        return out
    if s.last_message_offset < last.commitlog_offset:
        detail = f"the first bytes of a record, then zeros ({last.detail})"
        at = last.commitlog_offset - written[-1].framing.header  # a DLedger entry starts before its record
        out[s.segment] = dataclasses.replace(s, end_reason=END_TORN, end_offset=at, detail=detail, damage=s.damage[:-1])
    return out


def settle_damaged_ends(segments: list[Segment], summaries: Mapping[str, SegmentSummary]) -> dict[str, SegmentSummary]:
    """The summaries with each commitlog segment before the last one holding messages whose records stop at bytes
    the search past damage found no record start after (zeros, a bad magic, an impossible TOTALSIZE, a BLANK of
    the wrong length, a record running past the segment) read as damaged records from there to the segment's end.
    The broker never leaves such a segment (it ends a full segment with a BLANK of the bytes left): its recovery
    stops there like at any damaged record; outside its walk it serves the units that point there and every record
    of the next segments."""
    out = dict(summaries)
    with_messages = [i for i, seg in enumerate(segments) if summaries[seg.name].messages > 0]
    for seg in segments[: with_messages[-1] if with_messages else 0]:
        s = summaries[seg.name]
        if seg.framing is not COMMITLOG_FRAMING or s.end_reason not in RESYNC_REASONS:
            continue
        damage, start = list(s.damage), s.end_offset
        if damage and damage[-1].kind == DAMAGE_LENGTH and s.last_message_offset < damage[-1].commitlog_offset:
            start = damage.pop().commitlog_offset  # walked over by its TOTALSIZE: the damage starts there
        detail = f"the walk stopped there ({s.end_reason}{': ' + s.detail if s.detail else ''}), no record after it"
        damage.append(Damage(DAMAGED_RECORDS, start, detail, 0, seg.start + seg.size))
        out[seg.name] = dataclasses.replace(s, end_reason=END_BLANK, detail="", damage=tuple(damage))
    return out


def judge_ends(segments: list[Segment], summaries: Mapping[str, SegmentSummary]) -> list[Finding]:
    """How each segment's records stop, judged by its place in the log (see the module docstring)."""
    findings = []
    with_messages = [i for i, s in enumerate(segments) if summaries[s.name].messages > 0]
    last = with_messages[-1] if with_messages else -1
    for i, seg in enumerate(segments):
        s = summaries[seg.name]
        rel = seg.rel
        where: FindingFields = {"commitlog_offset": s.end_offset, "file_offset": s.end_offset - seg.start}
        if s.end_reason == END_UNREADABLE:
            findings.append(finding("unreadable-file", rel, s.detail, commitlog_offset=seg.start))
        elif i < last and s.end_reason not in (END_BLANK, END_EOF):
            message = f"records stop at {s.end_offset} ({s.end_reason}) in the middle of the log: {s.detail}"
            findings.append(finding(f"segment-{s.end_reason}", rel, message.rstrip(": "), **where))
        elif i >= last and s.end_reason not in (END_ZERO_TAIL, END_EOF, END_BLANK):
            message = (
                f"the log ends with a damaged record at {s.end_offset} ({s.end_reason}): {s.detail}; "
                "the broker would truncate here"
            )
            findings.append(finding("commitlog-torn-tail", rel, message, **where))
    return findings


def segment_errors(findings: Iterable[Finding]) -> list[Finding]:
    """The errors that stop a run or leave segments out: every error but damage to one record."""
    return [f for f in findings if f.severity == "error" and not KINDS[f.kind].record_damage]


#: damaged messages a damaged-records finding describes in its message; the others are counted
MESSAGES_NAMED = 20


def hole_finding(seg: Segment, d: Damage) -> Finding:
    """damaged-records: the byte range, every message whose header it holds with what is left of it, and what their
    queues lose."""
    end = d.end_offset if d.end_offset is not None else d.commitlog_offset
    named = [m.describe() for m in d.messages[:MESSAGES_NAMED]]
    more = len(d.messages) - len(named) + d.unlisted
    lost = f"{len(d.messages) + d.unlisted} message header(s) in it" + (f": {'; '.join(named)}" if named else "")
    message = (
        f"{end - d.commitlog_offset} bytes from commitlog offset {d.commitlog_offset} to {end} (file offsets "
        f"{d.commitlog_offset - seg.start} to {end - seg.start}) do not frame, {d.detail}; the next sound record is "
        f"at {end}. {lost}{f' and {more} more' if more and named else ''}. Their messages are not indexed: their "
        "queues get no ConsumeQueue unit for them (a unit the broker stops reading the queue at), nor IndexFile "
        "entries; what is read of them here is not trusted"
    )
    first = d.messages[0] if d.messages else None
    return finding(
        DAMAGED_RECORDS,
        seg.rel,
        message,
        topic=first.topic if first else None,
        queue_id=first.queue_id if first else None,
        queue_offset=first.queue_offset if first else None,
        commitlog_offset=d.commitlog_offset,
        file_offset=d.commitlog_offset - seg.start,
        count=end - d.commitlog_offset,
        actual=f"next sound record at {end}",
    )


def damaged_ranges(summaries: Iterable[SegmentSummary]) -> tuple[tuple[int, int], ...]:
    """The commitlog ranges [start, end) of the damaged-records holes of the segments."""
    return tuple(
        (d.commitlog_offset, d.end_offset)
        for s in summaries
        for d in s.damage
        if d.kind == DAMAGED_RECORDS and d.end_offset is not None
    )


def damage_findings(segments: list[Segment], summaries: Mapping[str, SegmentSummary]) -> list[Finding]:
    """One finding per damaged record: a CRC mismatch (or a DLedger entry header out of line) is kept, it frames
    correctly; the others are not; one per damaged byte range (hole_finding). Then the DLedger entries that do not
    follow the previous segment's last."""
    out = []
    for seg in segments:
        for d in summaries[seg.name].damage:
            if d.kind == DAMAGED_RECORDS:
                out.append(hole_finding(seg, d))
                continue
            kept = KINDS[d.kind].kept
            what = "kept: the record frames correctly and is dispatched" if kept else "not dispatched"
            m = d.messages[0] if d.messages else None
            out.append(
                finding(
                    d.kind,
                    seg.rel,
                    f"{d.detail} ({what}){': the message ' + m.describe() if m else ''}",
                    commitlog_offset=d.commitlog_offset,
                    file_offset=d.commitlog_offset - seg.start,
                )
            )
    return out + entry_chain_findings(segments, summaries)


def entry_chain_findings(segments: list[Segment], summaries: Mapping[str, SegmentSummary]) -> list[Finding]:
    """A DLedger data file whose first entry's index is not the previous file's last + 1, or whose term is below
    it: recovery stops there (``storelib.formats.dledger``)."""
    out = []
    with_entries = [(seg, summaries[seg.name]) for seg in segments if summaries[seg.name].first_entry_index >= 0]
    for (_, prev), (seg, s) in itertools.pairwise(with_entries):
        where: FindingFields = {"commitlog_offset": seg.start, "file_offset": 0}
        if s.first_entry_index != prev.last_entry_index + 1:
            message = f"entry index {s.first_entry_index} after {prev.last_entry_index} (end of {prev.segment})"
            out.append(finding(ENTRY_INDEX, seg.rel, message, **where))
        if s.first_entry_term < prev.last_entry_term:
            message = f"term {s.first_entry_term} after term {prev.last_entry_term} (end of {prev.segment})"
            out.append(finding(ENTRY_TERM, seg.rel, message, **where))
    return out


def max_offset(segments: list[Segment], summaries: Mapping[str, SegmentSummary]) -> int:
    """The end of the last valid record (the commitlog's max offset); the first start when no message."""
    with_messages = [s for s in segments if summaries[s.name].messages > 0]
    return summaries[with_messages[-1].name].end_offset if with_messages else segments[0].start


def plan_parse_tasks(segments: list[Segment], target_bytes: int, whole: Collection[str] = ()) -> list[list[Piece]]:
    """Consecutive segments grouped into tasks of about ``target_bytes``, in offset order: small segments do not
    each pay a task's fixed cost. A bigger commitlog segment is cut into that many byte ranges of equal size, a
    task each, unless it is named in ``whole`` (its ranges did not agree: ``merge_pieces``); a bigger DLedger data
    file is a task alone, whole."""
    tasks: list[list[Piece]] = []
    size = 0
    for s in segments:
        if tasks and size + s.size <= target_bytes:
            tasks[-1].append(Piece(s, 0, s.size))
            size += s.size
        elif s.size > target_bytes and s.framing is COMMITLOG_FRAMING and s.name not in whole:
            n = -(-s.size // target_bytes)
            step = -(-s.size // n)
            tasks += [[Piece(s, k * step, min((k + 1) * step, s.size), k, n)] for k in range(n)]
            size = target_bytes + 1  # nothing joins a range
        else:
            tasks.append([Piece(s, 0, s.size)])
            size = s.size
    return tasks


def messages_from(segments: list[Segment], summaries: Mapping[str, SegmentSummary], offset: int) -> int:
    """Message records at or after commitlog ``offset``: what the broker's truncation there takes from consumers.

    Exact when ``offset`` is a damaged record or where a segment's records end; later segments count whole."""
    out = 0
    for seg in segments:
        s = summaries[seg.name]
        if seg.start > offset:
            out += s.messages
        elif offset < seg.start + seg.size:
            out += next((d.messages_after for d in s.damage if d.commitlog_offset == offset), 0)
    return out
