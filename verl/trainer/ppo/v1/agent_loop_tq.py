"""Upstream verl v0.9's ``verl.trainer.ppo.v1.agent_loop_tq`` (``AgentLoopWorkerTQ``, ``AgentLoopManagerTQ``, the
agent loop writing into a TransferQueue store): not provided. The agent loop here returns its outputs to the
rollout that asked for them (:class:`verl.experimental.agent_loop.AgentLoopManager`), and the V1 modes run this
project's trainers. Importing this module raises ``ModuleNotFoundError`` saying so.
"""

raise ModuleNotFoundError(
    "verl.trainer.ppo.v1.agent_loop_tq (upstream's TransferQueue agent loop) is not provided here: use "
    "verl.experimental.agent_loop.AgentLoopManager, which the trainers of every trainer.v1.trainer_mode drive; "
    "see docs/porting_from_verl.md"
)
