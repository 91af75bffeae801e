"""Elastic quota arithmetic: what a namespace uses, and the capacity-scheduling checks."""
