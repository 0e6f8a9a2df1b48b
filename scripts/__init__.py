"""Runnable example sessions (also exercised by the tests)."""
