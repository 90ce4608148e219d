"""A hook plugin that only assigns to an attribute under opzoo.testing at import (no torch state):
without the guard, every check passed, a wrong backward's `1 failed` became `1 passed`."""

import opzoo
import opzoo.testing.properties as properties

properties._resolve = lambda where: lambda *args, **kwargs: None


@opzoo.hookimpl
def opzoo_ops():
    return {}
