"""`opzoo bench`: speed and memory of registered ops against the native ones, as ratios."""
