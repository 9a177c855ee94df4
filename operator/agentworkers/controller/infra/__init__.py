"""What every part of the operator shares: its options, metrics, sharding, the Pod
collector and tracing."""
