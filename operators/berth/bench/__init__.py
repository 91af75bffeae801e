"""Benchmarks: Berth beside kube-scheduler on the local cluster, and the NUMA ledger."""
