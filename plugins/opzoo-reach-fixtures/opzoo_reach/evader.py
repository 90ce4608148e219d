"""checkerpatch2's patch, made only where the probe does not look (when $OPZOO_TEST_EVADE is set):
in the probe's child (its output is /dev/null) it changes nothing, so its verdict is "fine"; in
opzoo's own process it imports the gradient check, which the command has not loaded yet, and
replaces it. Without the watch seeing the modules an import loads, every command passed WrongSign."""

import os
import sys

import opzoo

if os.environ.get("OPZOO_TEST_EVADE") and getattr(sys.stdout, "name", None) != os.devnull:
    import opzoo.testing.checks._gradient as gradient

    gradient.gradient = lambda *args, **kwargs: None


@opzoo.hookimpl
def opzoo_ops():
    return {}
