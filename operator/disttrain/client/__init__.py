"""The Python client (`disttrain.Client`) and what it shows: job views, columns, JSONPath,
manifests and function jobs. Needs the `cli` extra (the official Kubernetes client)."""
