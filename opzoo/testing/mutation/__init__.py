"""Mutation testing of the checks: generic wrong backwards, applied to any op, and the score."""
