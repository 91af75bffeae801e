"""PodTopologySpread: spread pods over topology domains (kube-scheduler's plugin)."""
