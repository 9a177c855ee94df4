"""The `agentworkers` command (also `kubectl workers`): `main` parses and dispatches;
`verbs` holds the lifecycle and config verbs, `render` the tables and views. The
operator's own command (`agentworkers operator`) imports kopf only when it runs."""
