"""Upstream verl v0.9's ``verl.trainer.ppo.v1.replay_buffer`` (``ReplayBuffer``, ``ReplayBufferAsync``): not
provided. Upstream's V1 trainers keep trajectories in a TransferQueue store (https://github.com/Ascend/TransferQueue);
here the V1 modes run this project's trainers, whose rollouter hands finished rollouts to the trainer through a
bounded queue in submission order (:class:`verl.trainer.fully_async_policy.rollouter.Rollouter`), stale groups
dropped by ``FullyAsyncRayPPOTrainer.drop_stale_groups``. Importing this module raises ``ModuleNotFoundError``
saying so.
"""

raise ModuleNotFoundError(
    "verl.trainer.ppo.v1.replay_buffer (upstream's TransferQueue-backed ReplayBuffer) is not provided here: "
    "trainer.v1.trainer_mode runs this project's trainers, whose rollouter queues rollouts itself "
    "(verl.trainer.fully_async_policy.rollouter.Rollouter); see docs/porting_from_verl.md"
)
