"""The Delta tables the verbs append to: the audit history and the message catalog (delta-rs writes, Spark reads)."""
