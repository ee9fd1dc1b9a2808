"""`python -m bench [NAME ...] [--json]`: the suite without installing the CLI."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
