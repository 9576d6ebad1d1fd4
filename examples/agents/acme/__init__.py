"""acme: an example of a user's own agent package for turnstream (see agents.py)."""
