"""The audit's report.html (a Jinja2 template with autoescaping) and console summary, Spark-free."""
