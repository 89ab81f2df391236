"""Audit rules, no Spark: how a live store's files differ from the index rebuilt from its commitlog, one module
per area (ConsumeQueue, BatchConsumeQueue, CommitLog, IndexFile files, IndexFile entries, scope and repairs)."""
