"""Measurement helpers: hardware labels, provenance and timing."""
