"""The Kopf registry every Berth operator module registers its handlers in.

A registry of our own (not Kopf's global default) keeps ``berth run`` from picking up
handlers that an importing program registered for itself, and lets tests run one set.
"""

from __future__ import annotations

import kopf

REGISTRY = kopf.OperatorRegistry()
