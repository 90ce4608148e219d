"""Calls sys.exit at import, as a careless script-turned-plugin might."""

import sys

sys.exit(3)
