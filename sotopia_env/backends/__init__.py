"""LLM backends: one interface, ``generate(requests) -> completions``.

- ``base``: ``ChatRequest``, ``Completion``, the ``Backend`` protocol.
- ``litellm_backend``: any litellm model or OpenAI-compatible server.
- ``local``: transformers on this machine, batched, JSON-schema constrained.
- ``scripted``: canned answers, for tests.
- ``resolve``: a model spec string -> a backend.
"""
