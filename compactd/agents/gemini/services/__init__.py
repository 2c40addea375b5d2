"""Gemini CLI's doors that do I/O: where its chats are, its hook events, its settings files (docs/gemini.md)."""
