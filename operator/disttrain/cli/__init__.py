"""`disttrain` / `kubectl disttrain`: the command line (`main`), the documents it reads,
`run --local` and the ports it picks. `python -m disttrain.cli` runs it."""
