"""The scheduler's cache of the cluster: nodes as columns, pods parsed once,
the reservations' holds and the volume objects, fed by watches and read by every
cycle."""
