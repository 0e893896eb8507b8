"""Mutation testing of `domain/` (`make mutate`, run.py)."""
