"""Analyses: pure functions from model frames to new frames; no I/O, no printing."""
