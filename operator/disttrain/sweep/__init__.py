"""`disttrain sweep`: hyperparameter search over a DistributedTraining template (docs/sweeps.md).

Pure core: spec (parse, validate), space (suggest, patch, trial jobs), results (table).
Shell: runner (the Optuna study), local and cluster (run one trial job), command (CLI).
"""
