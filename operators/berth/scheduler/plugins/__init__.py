"""Scheduler plugins, one concern each, registered by name in ``registry``."""
