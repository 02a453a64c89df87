"""Who acts: the agent protocol and the built-in agents.

An agent is anything with ``async act(observation) -> AgentAction`` and an
optional ``reset()``. See ``agents.base.Agent``.
"""
