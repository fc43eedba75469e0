"""Runnable examples; each is run by tests/e2e/test_examples.py."""
