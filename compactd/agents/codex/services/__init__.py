"""Codex CLI's doors that do I/O: where its sessions are, its hook events and the state they share, its config files (docs/codex.md)."""
