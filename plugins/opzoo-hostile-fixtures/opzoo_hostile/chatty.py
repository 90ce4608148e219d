"""Prints to stdout at import: machine-readable output must stay parseable."""

from opzoo_hostile._relu import ReLU as Op  # noqa: F401  (the entry point names it)

print("hello from chatty, loading")
