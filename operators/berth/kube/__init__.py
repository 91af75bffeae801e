"""Talking to the API server: clients, watches, writes, events and leader election."""
