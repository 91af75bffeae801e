"""Reservation lifecycle decisions, without I/O: what the operator writes and when."""
