"""Detectors and their runtimes. Imports neither ``app`` nor ``pipelines``."""
