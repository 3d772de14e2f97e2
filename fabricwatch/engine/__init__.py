"""Correlation engine."""
