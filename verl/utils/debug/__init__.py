"""Debugging helpers (verl's ``verl.utils.debug``): :mod:`.metrics`, the rollout-vs-actor probability gap."""
