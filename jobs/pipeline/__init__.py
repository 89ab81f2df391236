"""What each verb does on the driver, top to bottom: the Spark stages, in the order they run.

``jobs/<verb>.py`` parses the command line and calls one function here; the rules these stages apply live
in storelib, what the executors run in udfs.
"""
