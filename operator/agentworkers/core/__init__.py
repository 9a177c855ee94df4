"""The pure logic of the product: no I/O, no kopf, no client; unit-tested without a cluster.

`effective` resolves a run's config from its layers; `revisions` cuts and prunes
AgentConfigRevisions; `spawning` binds and checks profiled children; `pods` builds a
Worker's pod; `access` its runtime's RBAC; `conditions` the status conditions.
"""
