import os
import sys

from opzoo._commands import in_torchrun
from opzoo.cli import main

code = main()
if in_torchrun():
    # The process group is destroyed by now, but gloo (torch 2.13) can still hold work whose release
    # needs the GIL: during interpreter finalization that aborts the process ("terminate called
    # without an active exception", SIGABRT, in about one run of four here), after it has done
    # everything right. Leave without finalizing; nothing is left to flush but the streams.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
