"""The operator: thin kopf handlers over the pure logic and the storage layer.

Importing `agentworkers.controller.kopf.handlers` registers every handler with kopf;
`agentworkers operator` (see `agentworkers.cli`) runs them.
"""
