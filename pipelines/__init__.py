"""The streaming engine. Imports ``models``, never ``app``."""
