"""The scheduling queue: active, backoff and unschedulable pods, and the gated."""
