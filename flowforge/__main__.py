"""``python -m flowforge``: the same command line as the ``flowforge`` script."""

from __future__ import annotations

import sys

from flowforge.cli.main import main

sys.exit(main())
