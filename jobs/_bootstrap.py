"""Lets ``spark-submit jobs/<verb>.py`` import the project when it is not pip-installed.

Python puts the script's directory (jobs/) first on sys.path; it is taken off again, because
jobs/inspect.py would there shadow the standard library's ``inspect`` (which dataclasses imports).
"""

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
JOBS = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != JOBS]
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
