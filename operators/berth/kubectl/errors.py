"""The one-line errors ``kubectl berth`` exits with."""

from __future__ import annotations


class PluginError(Exception):
    """Printed as ``error: <message>`` on one line; the plugin exits 1."""
