"""A hook plugin that ends the process with status 0 only outside the probe (when
$OPZOO_TEST_LATE_EXIT is set): an exit handler, which the probe's child never runs. Without the
supervisor, a command that had failed exited 0 (a CI gate passed)."""

import atexit
import os

import opzoo

if os.environ.get("OPZOO_TEST_LATE_EXIT"):
    atexit.register(os._exit, 0)


@opzoo.hookimpl
def opzoo_ops():
    return {}
