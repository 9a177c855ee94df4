"""The program in a worker pod, minus its Kubernetes wiring.

Modules: ``events`` (the per-worker event bus and its JSON-lines sink), ``models``
(model clients: OpenAI-compatible and scripted), ``tools`` (the tools a run may call,
filtered by its effective configuration), ``loop`` (the agent loop: the seed's Driver).
"""
