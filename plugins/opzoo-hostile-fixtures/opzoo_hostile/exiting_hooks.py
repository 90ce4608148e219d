"""A hook plugin whose opzoo_ops calls sys.exit."""

import sys

import opzoo


@opzoo.hookimpl
def opzoo_ops():
    sys.exit(4)
