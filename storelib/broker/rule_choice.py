"""Which rule set of the release table a store gets: given (``--broker-version``) or detected, and settled once no two
rule sets the store's clues allow write different files for it (``RuleInputs``: the records that tell them apart;
``BrokerRules``; ``select``).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from storelib.broker.detection import (
    Releases,
    StoreFacts,
    Stretch,
    alike_everywhere,
    earlier_releases,
    intersect,
    releases,
)
from storelib.broker.versions import RuleSet, Version, parse_version, rules_for, version_text
from storelib.errors import AmbiguousRelease, ConfigError

#: the LMQ queues whose first and last offsets a RuleInputs keeps to judge the step between two of its parts; past
#: this many the steps across parts are unknown (and taken as possibly out of step)
LMQ_ENDS_KEPT = 10_000


@dataclasses.dataclass(frozen=True)
class RuleInputs:
    """A store's records that the rule sets of different releases dispatch differently (counted by the parse).

    Summed in commitlog order: an LMQ queue's units are out of step where one's offset is not one past the unit
    before it (a repeat, a skip, an earlier offset), within a part and between two parts (by ``lmq_ends``)."""

    tagged_index_records: int = 0  # records put into the IndexFile that hold TAGS (5.4.0 adds topic#T#<TAGS>)
    batch_cq_records: int = 0  # ConsumeQueue records of queue.type=BatchCQ topics (5.0.0+: batchconsumequeue/)
    lmq_sources: tuple[tuple[str, int], ...] = ()  # (source topic, records) with both INNER_MULTI_* properties
    lmq_unprefixed_names: int = 0  # INNER_MULTI_DISPATCH names without %LMQ% (5.0.0+ skip them)
    lmq_path_names: int = 0  # names holding "/" (5.1.2+ skip them)
    index_records: int = 0  # records put into the IndexFile (hashSlotCount counts every put before 4.7.1)
    split_pair_records: int = 0  # records with a dispatched property value holding 0x01 (before 4.9.1: no property)
    lmq_out_of_step: int = 0  # LMQ units whose offset is not one past their queue's unit before (commitlog order)
    lmq_ends: tuple[tuple[str, int, int], ...] = ()  # (LMQ queue, first offset, last offset), by queue name
    lmq_ends_unknown: bool = False  # more than LMQ_ENDS_KEPT queues: steps between parts not judged

    def __add__(self, other: RuleInputs) -> RuleInputs:
        """These inputs, then ``other``'s (the commitlog after them)."""
        sources = collections.Counter(dict(self.lmq_sources))
        sources.update(dict(other.lmq_sources))
        steps, ends = self._lmq_seams(other)
        unknown = self.lmq_ends_unknown or other.lmq_ends_unknown or len(ends) > LMQ_ENDS_KEPT
        return RuleInputs(
            self.tagged_index_records + other.tagged_index_records,
            self.batch_cq_records + other.batch_cq_records,
            tuple(sorted(sources.items())),
            self.lmq_unprefixed_names + other.lmq_unprefixed_names,
            self.lmq_path_names + other.lmq_path_names,
            self.index_records + other.index_records,
            self.split_pair_records + other.split_pair_records,
            steps,
            () if unknown else ends,
            unknown,
        )

    def _lmq_seams(self, other: RuleInputs) -> tuple[int, tuple[tuple[str, int, int], ...]]:
        """The LMQ units out of step in both, and where ``other``'s queues do not go on from these' last offsets;
        the queues' ends over both."""
        steps = self.lmq_out_of_step + other.lmq_out_of_step
        if not self.lmq_ends or not other.lmq_ends:
            return steps, self.lmq_ends or other.lmq_ends
        ends = {q: (first, last) for q, first, last in self.lmq_ends}
        for q, first, last in other.lmq_ends:
            steps += q in ends and first != ends[q][1] + 1
            ends[q] = (ends[q][0] if q in ends else first, last)
        return steps, tuple((q, *ends[q]) for q in sorted(ends))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RuleInputs:  # a JSON object
        sources = tuple((str(t), int(n)) for t, n in d.get("lmq_sources") or ())
        ends = tuple((str(q), int(first), int(last)) for q, first, last in d.get("lmq_ends") or ())
        return cls(**{**d, "lmq_sources": sources, "lmq_ends": ends})


def differences(a: RuleSet, b: RuleSet, inputs: RuleInputs, alike: frozenset[str] = frozenset()) -> list[str]:
    """Why rule sets ``a`` and ``b`` write different files for a store with ``inputs`` (``alike``: fields the live
    files show every row writes alike for it, storelib.broker.detection.Releases)."""
    out = []
    later = version_text(max(a.first, b.first))
    since = f"from {later} on"
    if a.index_tag_keys != b.index_tag_keys and inputs.tagged_index_records:
        out.append(f"{inputs.tagged_index_records:,} tagged message(s) get a topic#T#<TAGS> IndexFile key {since}")
    slots = a.hash_slot_every_put != b.hash_slot_every_put and "hash_slot_every_put" not in alike
    if slots and inputs.index_records:
        out.append(f"the IndexFile header's hashSlotCount counts occupied slots, not every put, {since}")
    if a.properties_split_pairs != b.properties_split_pairs and inputs.split_pair_records:
        n = inputs.split_pair_records
        out.append(f"{n:,} record(s) hold a property whose value has 0x01 (a pair split in three: none before {later})")
    if a.batch_cq != b.batch_cq and "batch_cq" not in alike and inputs.batch_cq_records:
        out.append(f"{inputs.batch_cq_records:,} record(s) of BatchCQ topics go to batchconsumequeue/ {since}")
    moved = [t for t, _ in inputs.lmq_sources if a.lmq_source_allowed(t) != b.lmq_source_allowed(t)]
    if moved:
        by = a.name if a.lmq_source_allowed(moved[0]) else b.name
        out.append(f"LMQ copies of {', '.join(moved)} records are dispatched by rule set {by} only")
    sources = any(a.lmq_source_allowed(t) or b.lmq_source_allowed(t) for t, _ in inputs.lmq_sources)
    if sources and a.lmq_names_need_prefix != b.lmq_names_need_prefix and inputs.lmq_unprefixed_names:
        out.append(f"{inputs.lmq_unprefixed_names:,} LMQ name(s) without %LMQ% are skipped {since}")
    if sources and a.lmq_skip_path_names != b.lmq_skip_path_names and inputs.lmq_path_names:
        out.append(f"{inputs.lmq_path_names:,} LMQ name(s) holding '/' are skipped {since}")
    if sources and a.lmq_at_write_position != b.lmq_at_write_position and inputs.lmq_out_of_step:
        by = a.name if a.lmq_at_write_position else b.name
        n = inputs.lmq_out_of_step
        out.append(f"{n:,} LMQ unit(s) out of step with their queue are written at its write position by rule set {by}")
    elif sources and a.lmq_at_write_position != b.lmq_at_write_position and inputs.lmq_ends_unknown:
        out.append(f"more than {LMQ_ENDS_KEPT:,} LMQ queues: whether their units keep step was not judged")
    return out


def lmq_writers(found: Releases, inputs: RuleInputs) -> tuple[tuple[RuleSet, ...], str]:
    """The rows of the releases in ``found`` whose appends give LMQ offsets to every source topic whose records
    hold them in this store (a release that gives a source none cannot have written its offsets), and why."""
    sources = [t for t, _ in inputs.lmq_sources]
    writers = tuple(r for r in found.candidates if all(r.lmq_offsets_given(t) for t in sources))
    if len(writers) == len(found.candidates):
        return writers, ""
    names = ", ".join(r.name for r in writers) or "no rule set"
    return writers, f"LMQ offsets on records of {', '.join(sources)}: appended under rule sets {names} only"


@dataclasses.dataclass(frozen=True)
class BrokerRules:
    """The rules a run uses, and why: given (``--broker-version``) or detected from the store's clues.

    Detected rules are ``settled`` once no two rule sets the clues allow write different files for this store
    (``settle``, after the parse has counted the records that tell them apart); until then the parse uses the
    oldest verified one of them.
    """

    rules: RuleSet
    source: str  # "--broker-version" or "detected"
    why: str
    releases: Releases | None = None  # detected: the releases the clues allow
    settled: bool = True
    version: str = ""  # the given release
    #: a store several releases wrote: the rules of each stretch before the last (its first record's offset,
    #: rules); these rules are the last stretch's, from ``start``
    earlier: tuple[tuple[int, BrokerRules], ...] = ()
    start: int = 0
    #: the commitlog these rules are for, as a refusal names it ("the whole commitlog", "commitlog offsets A up to B")
    covers: str = "the whole commitlog"

    @property
    def candidates(self) -> tuple[RuleSet, ...]:
        return self.releases.candidates if self.releases else (self.rules,)

    def settle(self, inputs: RuleInputs) -> BrokerRules:
        """These rules, once shown to write the same files as every rule set that could have written the store
        (the releases allowed, less those whose appends give no LMQ offsets to the store's multi-dispatched
        source topics); else AmbiguousRelease, naming what differs and the releases to choose from. Rules no
        broker verified are never the ones that write (AmbiguousRelease when only they are left)."""
        if self.settled:
            return self
        assert self.releases is not None
        scope = self.releases.widened
        writers, because = lmq_writers(scope, inputs)
        if not writers:
            raise ConfigError(
                f"the store's records contradict its clues for {self.covers} ({self.why}; {because}). Nothing was "
                "written: give the release with --broker-version X.Y.Z"
            )
        rules = self.rules
        chain = list(writers) if rules in writers else [rules, *writers]  # each difference said once, where it changes
        alike = scope.alike
        diffs = list(dict.fromkeys(d for a, b in itertools.pairwise(chain) for d in differences(a, b, inputs, alike)))
        classes: list[RuleSet] = []  # one row of each set of writers that write the same files
        for r in writers:
            if all(differences(c, r, inputs, alike) for c in classes):
                classes.append(r)
        choices = [version_text(scope.lowest_of(r)) or "" for r in classes]
        if diffs:
            raise AmbiguousRelease(
                f"the store cannot tell which broker release wrote it: for {self.covers} its clues allow "
                f"{self._allowed_text} ({self.why}{'; ' + because if because else ''}), and those releases write "
                f"different files for this store: {'; '.join(diffs)}. Nothing was written: give the release with "
                "--broker-version X.Y.Z",
                choices,
            )
        if not rules.verified:
            raise AmbiguousRelease(
                f"for {self.covers} the store's clues allow {self.releases.text} ({self.why}) only, whose rule sets "
                f"{', '.join(r.name for r in writers)} no real broker verified. Nothing was written: give the "
                "release with --broker-version X.Y.Z to use them",
                choices,
            )
        why = self.why + (f"; {because}" if because else "")
        why += f"; rule sets {', '.join(r.name for r in writers)} write the same files for this store"
        return dataclasses.replace(self, settled=True, why=why)

    def settle_earlier(self, inputs: RuleInputs) -> BrokerRules:
        """``settle`` for a stretch before the last one: a refusal offers no release to give, since
        ``--broker-version`` names the release that wrote the store last and settles the last stretch only (given
        an older release, the newer records would be parsed by its rules)."""
        try:
            return self.settle(inputs)
        except AmbiguousRelease as e:
            raise AmbiguousRelease(
                f"{e}; but that flag names the release that wrote the store last and settles only the records it "
                f"wrote: no flag settles {self.covers} yet",
                [],
            ) from None

    @property
    def _allowed_text(self) -> str:
        """The releases that may have written the range, and, when its first records' clues allow more than the
        last release's, why."""
        assert self.releases is not None
        scope = self.releases.widened
        if scope is self.releases:
            return self.releases.text
        return (
            f"{self.releases.text} for the release that ran last but {scope.text} for its first records (nothing "
            "left in the store tells whether an older release wrote them before an in-place upgrade: give the "
            "release only if that one wrote all of it)"
        )

    @property
    def lowest_release(self) -> str:
        """The oldest release these rules stand for: of the rule set, within the releases the clues allow."""
        low = self.releases.lowest_of(self.rules) if self.releases else self.rules.first
        return version_text(low) or ""

    @property
    def settled_all(self) -> bool:
        return self.settled and all(r.settled for _, r in self.earlier)

    @property
    def line(self) -> str:
        """The one console line: which rules, why, and which broker verified them (per stretch of an upgraded
        store: "from offset N:")."""
        out = [f"from commitlog offset {start:,}: {r.own_line}" for start, r in self.earlier]
        own = self.own_line
        return "; ".join([*out, f"from commitlog offset {self.start:,}: {own}"]) if out else own

    @property
    def own_line(self) -> str:
        source = f"detected, releases {self.releases.text}" if self.releases else self.source
        aside = self.releases.set_aside if self.releases else ()
        why = self.why + "".join(f"; set aside: {c.text}, a weak clue ({c.weak})" for c in aside)
        return f"broker rules {self.rules.name} ({source}; {self.rules.verified_text}): {why}"

    @property
    def stretches(self) -> tuple[tuple[int, str], ...]:
        """BrokerConfig.releaseStretches of these rules: each later stretch's start and the release its parse uses."""
        return (
            tuple((start, r.lowest_release) for start, r in [*self.earlier[1:], (self.start, self)])
            if self.earlier
            else ()
        )

    def to_dict(self) -> dict[str, object]:
        return {
            **self.rules.to_dict(),
            "source": self.source,
            "why": self.why,
            "version": self.version or None,
            "releases": self.releases.text if self.releases else None,
            "clues": [c.to_dict() for c in self.releases.clues] if self.releases else [],
            "set_aside": [c.to_dict() for c in self.releases.set_aside] if self.releases else [],
            "stretches": [{"start": start, **r.to_dict()} for start, r in self.earlier]
            + ([{"start": self.start, "name": self.rules.name}] if self.earlier else []),
        }


def refuse_mixed_slot_counts(stretches: list[tuple[int, BrokerRules]], inputs: Mapping[int, RuleInputs]) -> None:
    """ConfigError when a stretch (start, rules; ``inputs`` by stretch number) puts records into IndexFiles under
    rules whose header hashSlotCount differs from the first stretch's (every put before 4.7.1, occupied slots
    after): the IndexFiles are written by one rule, and the one the newer release went on writing holds a count of
    both kinds, which depends on the newer release's exact first record (the real 4.5.2 -> 5.5.0 store: 1,879 in
    the IndexFile both wrote, neither its 1,999 puts nor its occupied slots)."""
    first = stretches[0][1].rules.hash_slot_every_put
    for n, (start, rules) in enumerate(stretches):
        if inputs.get(n, RuleInputs()).index_records and rules.rules.hash_slot_every_put != first:
            raise ConfigError(
                f"the records from commitlog offset {start:,} were written by {rules.lowest_release} or later, "
                "whose IndexFile hashSlotCount counts occupied slots, those before by a release before 4.7.1, whose "
                "count is every put: the IndexFile both wrote holds a count of both kinds, which depends on the "
                "first record the newer release wrote, unknown within the stretch boundary. Nothing was written: "
                "no --broker-version X.Y.Z settles such a store yet"
            )


def _against_clues(version: Version, facts: StoreFacts) -> str:
    """A warning when a given release lies outside the releases the store's clues allow, else ""."""
    try:
        found = releases(facts)
    except ConfigError:
        return ""
    if found.holds(version):
        return ""
    return f" (WARNING: the store's clues allow {found.text}: {'; '.join(c.text for c in found.clues)})"


def given_releases(version: str) -> Releases:
    """The releases a ``--broker-version`` names: one release (``5.3.3``) or a whole line (``4.9``: 4.9.0 up to
    4.10.0)."""
    v = parse_version(version)
    rules_for(v)
    line = version.strip().count(".") == 1
    return Releases.between(v, (v[0], v[1] + 1, 0) if line else (v[0], v[1], v[2] + 1))


def select(version: str, facts: StoreFacts) -> BrokerRules:
    """The rules to use: a given ``--broker-version`` wins over detection from the store (a line, ``4.9``, is
    narrowed by the clues and settled like detection when its releases' rows differ). Detected rules are the
    oldest verified rule set the clues allow, settled at once when the clues allow only one."""
    if version:
        why = f"--broker-version {version}" + _against_clues(parse_version(version), facts)
        given = given_releases(version)
        if len(given.candidates) == 1:
            return BrokerRules(rules_for(version), "--broker-version", why, version=version)
        try:
            narrowed = intersect(given.spans, releases(facts).spans) or given.spans
        except ConfigError:
            narrowed = given.spans
        return _unsettled(Releases(narrowed), facts, "--broker-version", why, version)
    found = releases(facts)
    why = "; ".join(c.text for c in found.clues if c not in found.set_aside) or "no clue in the store"
    return _unsettled(found, facts, "detected", why, "")


def select_stretches(version: str, facts: StoreFacts, stretches: tuple[Stretch, ...]) -> BrokerRules:
    """``select`` for a store several releases wrote in turn (``stretches``, oldest first): the last stretch's rules
    from every clue (config/ files that only an older release may have left are weak: the upgrade may not have
    rewritten them) or from ``--broker-version``, each earlier stretch's from its own records."""
    if len(stretches) < 2:
        return select(version, facts)
    last = select(version, dataclasses.replace(facts, upgraded=True))
    later = given_releases(version) if last.releases is None else last.releases  # given: the last stretch's
    earlier = []
    ends = [s.start for s in stretches[1:]]
    for stretch, end in reversed(list(zip(stretches[:-1], ends))):
        found = earlier_releases(stretch, later, end, alike_everywhere(facts))
        lmq = StoreFacts(lmq_sources=stretch.lmq_sources)
        rules = _unsettled(found, lmq, "detected", stretch.clue.text, "")
        covers = f"commitlog offsets {stretch.start:,} up to {end:,}"
        earlier.append((stretch.start, dataclasses.replace(rules, covers=covers)))
        later = found
    covers = f"commitlog offsets from {stretches[-1].start:,}"
    return dataclasses.replace(last, earlier=tuple(reversed(earlier)), start=stretches[-1].start, covers=covers)


def _unsettled(found: Releases, facts: StoreFacts, source: str, why: str, version: str) -> BrokerRules:
    """The rules the parse uses: the oldest verified row whose appends give LMQ offsets to the source topics of
    the sampled records that hold them (no other row can have written them), settled when it is the only row. Where
    the live batchconsumequeue/ shows every release that wrote its topics' records had BatchConsumeQueues
    (``alike`` batch_cq), a row that has them: the rows before 5.0.0 cannot have written those records."""
    cands = found.candidates
    writers = [r for r in cands if all(r.lmq_offsets_given(t) for t in facts.lmq_sources)] or list(cands)
    if "batch_cq" in found.alike:
        writers = [r for r in writers if r.batch_cq] or writers
    rules = ([r for r in writers if r.verified] or writers)[0]
    settled = len(found.widened.candidates) == 1 and rules.verified
    return BrokerRules(rules, source, why, found, settled=settled, version=version)
