"""The passes over each kind (`workers`, `configs`, warm `pools`, pooled `identities`,
`quotas`), the `lineage` index they read, and the `requeue` that runs them."""
