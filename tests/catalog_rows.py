"""Hand-written message rows of two brokers for the Delta catalog tests (tests/test_delta.py, tests/test_s3.py),
and the catalog queries of docs/delta-tables.md."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from pyspark.sql.pandas.types import from_arrow_schema

from udfs.schema import MESSAGE_SCHEMA

DELTA_PAGE = Path(__file__).resolve().parents[1] / "docs" / "delta-tables.md"
T0 = int(dt.datetime(2024, 5, 1, 21, 0, tzinfo=dt.UTC).timestamp() * 1000)  # 2024-05-01 21:00 UTC
HOUR = 3_600_000


def record(**fields: object) -> dict:
    return {**dict.fromkeys(MESSAGE_SCHEMA.names), "segment": "00000000000000000000", **fields}


def message(offset: int, topic: str, queue_id: int, queue_offset: int, ts: int, keys: str | None) -> dict:
    return record(
        commitlog_offset=offset,
        size=200,
        topic=topic,
        queue_id=queue_id,
        queue_offset=queue_offset,
        sys_flag=0,
        tags_code=7,
        tags="TagA",
        keys=keys,
        uniq_key=f"UNIQ{offset:04d}",
        born_timestamp=ts - 5,
        store_timestamp=ts,
        to_consume_queue=True,
    )


#: broker-a: orders queue 1 hourly from 21:00, queue 0 at 22:30 and 03:00, one payment two days later
BROKER_A = [
    *(
        message(200 * i, "orders", 1, i, T0 + i * HOUR, keys)
        for i, keys in enumerate(["ORD-1230", "ORD-1231 X", "ORD-1234  ORD-9", None, "ORD-1233"])
    ),
    message(1000, "orders", 0, 0, T0 + 90 * 60_000, "ORD-2000"),
    message(1200, "orders", 0, 1, T0 + 6 * HOUR, ""),
    message(1400, "payments", 0, 0, T0 + 37 * HOUR, "ORD-1234"),
]
BROKER_B = [message(200 * i, "orders", 1, i, T0 + 30 * 60_000 + i * HOUR, f"B-{i}") for i in range(3)]


def records_df(spark, rows: list[dict]):
    return spark.createDataFrame(rows, from_arrow_schema(MESSAGE_SCHEMA))


def catalog_page_queries() -> list[str]:
    text = DELTA_PAGE.read_text()
    section = text[text.index("<!-- BEGIN delta -->") : text.index("<!-- END delta -->")]
    return re.findall(r"```sql\n(.*?)```", section, re.S)
