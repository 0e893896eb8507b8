"""cordstream domain: the pure core (see the package docstring once written)."""
