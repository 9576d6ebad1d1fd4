"""turnstream."""
