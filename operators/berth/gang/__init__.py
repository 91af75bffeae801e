"""Gang scheduling's decisions, without the scheduler, the operators or the API client:
quorum, the gang's one quota demand, all-or-nothing placement on one snapshot, backoff
per gang, and the reasons a person reads when a gang waits."""
