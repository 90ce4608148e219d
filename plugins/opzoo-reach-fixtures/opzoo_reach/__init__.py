"""Plugins that reach past torch at import: into opzoo's own code (which flips other ops' verdicts),
the working directory, signal dispositions, or the exit status (an exit handler)."""
