"""The ``compactd`` command line (``compactd.cli.main``)."""

from compactd.cli.main import main

__all__ = ["main"]
