"""Benchmarks: scripts that print figures (`make bench`), never tests that fail when slow."""
