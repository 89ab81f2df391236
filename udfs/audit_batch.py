"""BatchConsumeQueue audit work that runs on executors (the ConsumeQueue's is udfs.audit_tasks.audit_queue): one queue's
live and rebuilt files are read here, through udfs.fs, never on the driver."""

from __future__ import annotations

from storelib.audit.batch_queues import classify_batch_queue
from storelib.audit.queues import QueueAudit
from storelib.broker.config import BrokerConfig
from storelib.formats.batchcq import BATCH_CONSUME_QUEUE
from udfs.fs import join, read_file, resolve


def audit_batch_queue(
    key: tuple[str, int],
    names: tuple[list[str], list[str]],
    store: str,
    rebuilt: str,
    cfg: BrokerConfig,
    cl: tuple[int, int],
    damaged: tuple[tuple[int, int], ...] = (),
) -> QueueAudit:
    """One BatchConsumeQueue's live and rebuilt files (``names``) read and classified. ``cl``: the commitlog's min
    offset and the end of its last valid record; ``damaged``: the commitlog ranges of damaged records."""
    rel = BATCH_CONSUME_QUEUE.queue_dir(*key)

    def read(uri: str, files: list[str]) -> dict[str, bytes]:
        fs, root = resolve(uri)
        return {n: read_file(fs, join(root, rel, n)) for n in files}

    return classify_batch_queue(*key, read(store, names[0]), read(rebuilt, names[1]), cfg, *cl, damaged)
