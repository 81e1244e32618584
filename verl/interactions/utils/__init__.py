"""Helpers of the interactions package: the interaction-config loader."""
