"""A Worker's pass, decided: from one context gathered from the store, the status to write,
the Events to post and the writes to make (docs/architecture.md, "A Worker's pass").

Pure: no I/O, and no clock but the context's `now`. `decide` reads the context top to
bottom and returns a `Plan`; `controller/passes/workers.py` gathers the context and carries the
plan out, with one status write. Starting the run's pod is the one write whose result the
rest of the plan depends on (a warm pod claimed, or a cold one made): the plan stops there
(`Plan.start`) and `started` finishes it with the pod.

Writes are ordered so that a pass cut short at any line leaves what the next pass mends:
everything the status will name exists before the status is written (`Plan.before`); the
writes that must not happen unless the status landed come after it (`Plan.after`).

The package's modules: `plan` (the context, the plan and the writes it asks for; the
status as written), `decision` (`decide`, `started`: a live run's pass, up to its pod),
`running` (a started run followed through its pod: its queue, phase and idle clock) and
`ends` (a run that stops or ended: `stop`, kills, the tree's sums and TTL).
"""
