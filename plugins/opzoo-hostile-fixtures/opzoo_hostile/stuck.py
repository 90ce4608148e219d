"""An import that never returns (waiting on something that never comes): opzoo must not hang."""

import threading

threading.Event().wait()
