"""Ends the process at import, as no exception handler can stop: opzoo must not be ended with it."""

import os

os._exit(0)
