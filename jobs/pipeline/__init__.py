"""What each verb does on the driver, top to bottom: the Spark stages, in the order they run.

``jobs/<verb>.py`` parses the command line and calls one function here; the rules these stages apply live
in storelib, what the executors run in udfs. Three layers, each importing only those below it (conf/import_contract.py):
the types every stage takes (context: ``Run``, ``Found``; audit_types: ``Audit``) and helpers (tasks, progress,
listing, liveness, durable writes); the stages; the verbs' flows (``*_flow``), which wire the stages in order.
"""
