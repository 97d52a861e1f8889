"""What the operator does with other controllers of the cluster: Kueue's admission
(`integrations.kueue`). docs/architecture.md says where a new integration goes."""
