"""``rmqstore replay``: stored messages sent again to a live cluster (the messages, the rules of what the broker
would do with each, the journal). Spark-free."""
