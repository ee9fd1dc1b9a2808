"""`python -m bench.paths`: the paths benchmark (run.py)."""

import sys

from .run import main

sys.exit(main())
