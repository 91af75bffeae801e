"""Kopf operators, one module per custom resource, sharing one registry."""
