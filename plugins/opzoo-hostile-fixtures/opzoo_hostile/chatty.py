"""Prints to stdout at import: machine-readable output must stay parseable."""

from opzoo_hostile._relu import ReLU as Op

print("hello from chatty, loading")
