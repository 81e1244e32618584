"""Features whose interfaces follow verl's ``verl.experimental`` package (the agent loop).

verl's ``verl.experimental.fully_async_policy`` and ``verl.experimental.one_step_off_policy`` name the asynchronous
trainers, which subclass the PPO driver and so live with it (``verl/trainer/fully_async_policy``,
``verl/trainer/one_step_off_policy``; the same modules under both names, :mod:`verl.utils._moved`): nothing here
imports the trainer."""
