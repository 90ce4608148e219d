"""The checks: one function per property, and what they share (`_bound`)."""
