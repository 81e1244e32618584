"""The typed config sections of the actor, critic, rollout, reward model, optimizer, engine and profiler (verl's
``verl.workers.config``), on the ground floor beside :mod:`verl.base_config`.

They are plain dataclasses that import nothing but :mod:`verl.base_config` and each other, so every floor that reads
a section can import its type: the policy losses (``ActorConfig``), the optimizer helpers (``OptimConfig``), the LLM
judge (``JudgeConfig``), the workers and the trainer. :mod:`verl.workers.config` re-exports every class, and verl's
``verl.workers.config.<module>`` paths name these same modules (:mod:`verl.utils._moved`). The YAML files hold the
defaults; a test keeps them identical to these dataclasses.
"""
