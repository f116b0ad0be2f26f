"""Small private helpers, one job per module."""
