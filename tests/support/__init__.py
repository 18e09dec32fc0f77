"""Helpers the tests share: fakes for what a test is not about, and the CLI runner."""
