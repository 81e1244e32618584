"""The worker ``strategy`` values this project runs (``actor.strategy``, ``ref.strategy``, ``critic.strategy``): both
of upstream verl's FSDP names select the FSDP2 workers (``verl/workers/fsdp_workers.py``).

A fact of its own, below the checks that read it (:mod:`.parallel_checks` for the actor and critic,
:mod:`.upstream_keys` for the reference), so neither check module imports the other for it.
"""

from __future__ import annotations

__all__ = ["IMPLEMENTED_STRATEGIES"]

# strategy values that run: both names select this project's FSDP2 workers
IMPLEMENTED_STRATEGIES: tuple[str, ...] = ("fsdp", "fsdp2")
