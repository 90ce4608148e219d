"""A hook plugin that changes the working directory at import (to $OPZOO_TEST_CHDIR, when set):
without the guard, relative --checkpoint, --metrics and --plot paths were written in its folder."""

import os

import opzoo

if os.environ.get("OPZOO_TEST_CHDIR"):
    os.chdir(os.environ["OPZOO_TEST_CHDIR"])


@opzoo.hookimpl
def opzoo_ops():
    return {}
