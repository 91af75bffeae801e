"""The scheduling framework: the plugin interface and extension points
(interface), the runtime that runs a profile's plugins at each point, the cluster events
plugins register for, and what several plugins share (free capacity, preemption,
kube-scheduler's messages, argument decoding)."""
