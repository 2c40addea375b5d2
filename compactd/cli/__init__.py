"""The ``compactd`` command line. It starts in ``compactd.cli.entry:main``, which hands an
agent's command line to the agent's package and everything else to ``compactd.cli.main``."""
