"""Ops contributed to opzoo through the ``opzoo_ops`` hook (see hooks.py)."""
