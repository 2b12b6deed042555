"""`python -m guardsolve` runs the command line."""

import sys

from guardsolve.cli import main

sys.exit(main())
