"""What Spark runs on executors: the functions handed to ``mapInArrow``/``mapPartitions`` (segment parsers, file
writers, the audit's readers), the paths they use and their Arrow schemas. No registered Spark UDF lives here: the
package name is the project's fixed layout."""
