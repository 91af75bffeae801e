"""Load-aware scheduling: a node's real usage (NodeMetric) plus what it is about to get."""
