"""``config/delayOffset.json``: where each delay level's ``SCHEDULE_TOPIC_XXXX`` queue (queueId = level - 1) is
delivered up to (``ScheduleMessageService``, a ``ConfigManager``): ``{"dataVersion": {...}, "offsetTable":
{level: next queue offset}}`` as fastjson writes it (integer keys bare, not quoted), persisted every
flushDelayOffsetInterval (10 s) and at shutdown, with a ``.bak`` copy. A level is in the table once the broker has
looked at its queue; the value is the first queue offset not yet delivered."""

from __future__ import annotations

import json
import re

from storelib.errors import StoreFormatError

PATH = "config/delayOffset.json"
_BARE_KEY = re.compile(r"([{,]\s*)(-?[0-9]+)(\s*:)")


def parse(text: str, file: str = PATH) -> tuple[dict[int, int], dict | None]:
    """(offsetTable as {level: offset}, dataVersion or None) of a delayOffset.json; StoreFormatError when the broker
    could not read it either."""
    try:
        doc = json.loads(_BARE_KEY.sub(r'\1"\2"\3', text))
        table = {int(k): int(v) for k, v in (doc.get("offsetTable") or {}).items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise StoreFormatError(f"not a delay offset table: {exc}", file) from None
    version = doc.get("dataVersion")
    return table, version if isinstance(version, dict) else None


def encode(table: dict[int, int], data_version: dict | None, fastjson2: bool) -> str:
    """The file as the broker's pretty persist writes it: tab indents, bare integer keys in order; fastjson 1 (up
    to 5.3.x) puts the table's entries on one line, fastjson2 (5.4.0 on) one per line."""
    lines = ["{"]
    if data_version is not None:
        inner = ",\n".join(f'\t\t"{k}":{json.dumps(data_version[k])}' for k in sorted(data_version))
        lines.append('\t"dataVersion":{\n' + inner + "\n\t},")
    entries = [f"{level}:{offset}" for level, offset in sorted(table.items())]
    if fastjson2:
        body = "\n" + ",\n".join(f"\t\t{e}" for e in entries) + "\n\t" if entries else ""
    else:
        body = ",".join(entries) + "\n\t"
    lines.append('\t"offsetTable":{' + body + "}")
    lines.append("}")
    return "\n".join(lines)
