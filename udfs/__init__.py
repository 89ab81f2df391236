"""The functions Spark runs on executors: segment parsers, file writers, and their Arrow schemas."""
