"""NUMA-aware fit from NodeResourceTopology reports, minus what is pending on the node."""
