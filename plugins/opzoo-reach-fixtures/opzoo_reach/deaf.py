"""A hook plugin that ignores SIGTERM and SIGINT at import (when $OPZOO_TEST_DEAF is set): without
the guard, `opzoo train` could be stopped only by SIGKILL."""

import os
import signal

import opzoo

if os.environ.get("OPZOO_TEST_DEAF"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@opzoo.hookimpl
def opzoo_ops():
    return {}
