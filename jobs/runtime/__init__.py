"""The driver's Spark runtime: the session and its settings layers, the pinned jars, the class-data archive, and the
package ``make dist`` ships to a cluster."""
