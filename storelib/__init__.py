"""rmq-store-rebuild's format library: RocketMQ store files in pure Python + numpy.

One module per format (commitlog, consumequeue, indexfile, checkpoint), plus the
broker settings (config), Java hashing (javahash), dispatch rules (dispatch) and
the shared constants and errors (constants). No Spark here.
"""
