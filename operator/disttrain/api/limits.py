"""The bounds of a job's size, stated once (the CRD, the offline validator and the names
of a job's children read them)."""

MAX_NODES = 1024
MAX_GPUS_PER_NODE = 64
# Processes per worker pod: one per GPU, or per CPU core group on CPU nodes.
MAX_NPROC_PER_NODE = 128
MAX_NODES_REASON = ("each worker is a pod the operator watches and a rendezvous member; "
                    "1024 nodes is beyond what one c10d store serves well")
