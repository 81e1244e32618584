"""Moved to :mod:`verl.experimental.agent_loop.openai_schemas` (shared by ``verl serve`` and the rollout's OpenAI
endpoint for agents, :mod:`verl.experimental.agent_loop.openai_agent`); this name is the same module object."""

import sys

from verl.experimental.agent_loop import openai_schemas as _moved

sys.modules[__name__] = _moved
