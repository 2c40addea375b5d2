"""The agents compactd works inside, one package each (docs/agents.md)."""
