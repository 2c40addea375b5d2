"""The operations on a session, each given the session and what it needs explicitly."""
