"""Controllers: turn a resolved spec into running replicas and decide job, trial and study states.

`jobs` runs one custom job (plan, start, watch, stop); `study` runs a study of trials, each a
custom job. Controllers talk to executors only through the contract in `vcli.executors` and to
the store; they never render anything (the CLI and `vcli.view` do).
"""
