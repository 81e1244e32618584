"""``openai_agent``: any agent written against the OpenAI API, trained unchanged through an endpoint on 127.0.0.1
during rollouts, token for token (``docs/any_agent.md``).

Modules: :mod:`.loop` (the agent loop, ``rollout.agent.openai.*``), :mod:`.agents` (running the user's callable or
command), :mod:`.endpoint` (the OpenAI routes of one trajectory), :mod:`.trajectory` (token-exact recording and
splitting), :mod:`.http` (the standard-library HTTP server).
"""
