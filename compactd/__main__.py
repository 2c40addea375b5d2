"""``python -m compactd`` is the same as the ``compactd`` command."""

from __future__ import annotations

import sys

from compactd.cli.entry import main

sys.exit(main())
