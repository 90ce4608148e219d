"""General opzoo ops for opzoo's own tests: right ones, and wrong twins."""
