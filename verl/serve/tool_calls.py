"""Moved to :mod:`verl.experimental.agent_loop.openai_tool_calls` (shared by ``verl serve`` and the rollout's OpenAI
endpoint for agents, :mod:`verl.experimental.agent_loop.openai_agent`); this name is the same module object."""

import sys

from verl.experimental.agent_loop import openai_tool_calls as _moved

sys.modules[__name__] = _moved
