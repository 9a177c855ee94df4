"""kopf's side of the operator: its start-up and settings, the handlers, the admission
webhooks, and the fixes to kopf's private parts (`kopf_fixes`).

Importing `handlers` (and `webhooks`) registers their handlers with kopf."""
