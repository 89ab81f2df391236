"""rmq-store-rebuild's library: every RocketMQ store format fact and broker rule, in pure Python + numpy, no Spark.

Layers, each importing only the ones above it (``make lint`` checks it: conf/import_contract.py):

- ``errors``, ``constants``, ``layout`` (store names and paths), ``findings`` (the registry of finding kinds);
- ``formats/``: one module per on-disk file type (layout, sizes, name rule, decode/encode, validation);
- ``broker/``: the broker's rules: its settings, dispatch, where segments end, its next start, the release table;
- ``reports/``: what the verbs report (rebuild.json, report.json, recover's plan, the verdict, inspect);
- ``audit/``: how a live store differs from the rebuilt index, one module per area; ``replay/``: what a replay
  sends as what, and its journal;
- ``synthetic/``: stores written on purpose (the demo, tests, the bench), apart from the product code.
"""
