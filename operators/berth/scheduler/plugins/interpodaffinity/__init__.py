"""InterPodAffinity: pod affinity and anti-affinity (kube-scheduler's plugin)."""
