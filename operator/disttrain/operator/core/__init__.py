"""The operator's pure core: `plan.decide` turns a job, its pods and the cluster's answers
into a plan (what to create, delete, write and when to look again), with the policies it
reads: failures, eviction, goodput, lost nodes, pods, status and back-off. No I/O: the
shell in `disttrain.operator` carries each plan out."""
