"""A third party's surrogate-gradient opzoo ops for opzoo's own tests: a right one, and a wrong twin."""
