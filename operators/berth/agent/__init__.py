"""The node agent (``berth agent``): samples the node's real usage and reports it in the
node's NodeMetric, as Koordinator's koordlet does."""
