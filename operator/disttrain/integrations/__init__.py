"""What the operator does with other controllers of the cluster, each behind one protocol
(`protocol.py`) and one line of `registry.py`: Kueue's admission (`kueue`), gang
scheduling's PodGroups (`gang`), Volcano's queues (`volcano`). docs/architecture.md,
"Integrations", says what an integration can do and how one is added."""
