"""Where the local cluster's sources, binaries and state live.

The local cluster is a development tool: it works from a checkout of the repository, whose
ignored ``.cache/`` folder holds the built binaries and the running cluster's state
(``BERTH_CACHE_DIR`` moves it).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[3]
TOOLS_DIR = REPO_DIR / "tools" / "localcluster"
CACHE_DIR = Path(os.environ.get("BERTH_CACHE_DIR", REPO_DIR / ".cache"))
CLUSTER_DIR = CACHE_DIR / "cluster"
