"""The decision record: what the scheduler decided for each pending pod, and why."""
