"""Service-level objectives of nodes: the NodeMetric collect policy and where it comes from."""
