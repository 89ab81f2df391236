"""One end-to-end rebuild on ``local-cluster[2,1,1024]``: separate executor JVMs and Python workers.

Nothing may lean on the driver's memory or process: segments are read, parsed and written
by executors. Runs the command line in its own process (one SparkContext per process).
"""

from __future__ import annotations

import subprocess
import sys

from tests.test_rebuild import assert_same_index


def test_rebuild_on_local_cluster_matches_the_broker(fixture_dir, tmp_path):
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "jobs.cli",
        "rebuild",
        "--store",
        str(fixture_dir / "expired"),
        "--out",
        str(out),
        "--broker-config",
        str(fixture_dir / "broker.conf"),
        "--master",
        "local-cluster[2,1,1024]",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rebuild: 16 segments, 6,900 messages, 25 queues, 5 index files" in done.stdout
    assert_same_index(fixture_dir / "expired", out)
