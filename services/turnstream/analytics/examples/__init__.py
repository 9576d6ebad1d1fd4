"""Example processors built on the analytics codecs and typed events."""
