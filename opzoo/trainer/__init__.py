"""The trainer: the seed's two-layer network from registered ops, its data, loop and checkpoints.
No argument parsing here (that is `opzoo.cli._train`)."""
