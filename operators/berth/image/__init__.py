"""Berth's container image, built from the checkout without a Docker engine or a registry.

A Debian root filesystem (mmdebstrap), Berth's locked wheels installed into it, a smoke run
inside it, and an image archive written with the standard library: ``./dev image``.
"""
