"""The ``compactd`` command line; its entry point is ``compactd.cli.main:main``."""
