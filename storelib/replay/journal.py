"""The journal of a replay: one JSON line per message the cluster holds (sent by a replay, or found there), appended
and flushed to disk as soon as the broker answered, before the next message is sent. A replay skips every message
its journal names, so an interrupted replay run again sends what is left, and a finished one run again sends
nothing. A send the broker acknowledged whose line the interruption lost is found by the presence check (the
cluster queried by UNIQ_KEY before each send), not sent twice."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import IO

from storelib.errors import BadInput

SENT, PRESENT = "sent", "present"


@dataclasses.dataclass(frozen=True)
class Entry:
    key: str  # Send.journal_key
    result: str  # SENT or PRESENT
    msg_id: str  # the broker's answer (offsetMsgId), or where it was found


class Journal:
    """An append-only file of Entry lines; ``done`` the keys it names."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done = {e.key for e in read_journal(path)} if path.exists() else set()
        self._file: IO[str] | None = None

    def record(self, entry: Entry) -> None:
        """Append ``entry`` and flush it to disk (fsync) before returning."""
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._file.write(json.dumps(dataclasses.asdict(entry)) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self.done.add(entry.key)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_journal(path: Path) -> list[Entry]:
    """The entries of a journal; a last line cut short by an interruption is ignored (its message is checked with
    the cluster again), any other bad line refused."""
    lines = path.read_text(encoding="utf-8").split("\n")
    entries = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entries.append(Entry(**json.loads(line)))
        except (ValueError, TypeError):
            if n == len(lines):  # no newline after it: the write was interrupted
                continue
            raise BadInput(f"{path} line {n}: not a replay journal line") from None
    return entries
