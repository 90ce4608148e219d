import sys

from opzoo.cli import main

sys.exit(main())
