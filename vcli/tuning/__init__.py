"""The study layer's wing: everything that decides what a study tries next and when it stops
a trial, with no knowledge of how trials run.

- `suggesters/`: the algorithms behind `studySpec.algorithm` (vcli's GP, TPE, grid, random);
- `space.py`: the search space (parameters, scaling, encoding) that suggesters and PBT share;
- `columns.py`: one column of that space (its node, built from a parameter spec, and warping);
- `stopping.py`: the early-stopping rules (`--early-stopping`, `studySpec.earlyStopping`);
- `pbt.py`: Population Based Training (the population, exploit and explore);
- `pareto.py`: several metrics: Pareto fronts and the trials a study reports as best.

Imports only `vcli.spec`, `vcli.enums`, `vcli.errors` and itself (tests/test_layering.py).
"""
