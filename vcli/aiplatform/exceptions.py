"""The exceptions of `google.api_core.exceptions` that vcli's SDK raises, under the same names.

`NotFound`: `CustomJob.get`, `HyperparameterTuningJob.get`, `start_run(resume=True)` and
`get_experiment_df` of something vcli's store does not hold. Its text is the CLI's line
(`CustomJob [123] was not found. List jobs with `vcli custom-jobs list`.`); `code` is 404, as
the HTTP status Vertex's API answers. It is also vcli's `NotFoundError`.
"""

from __future__ import annotations

from vcli.errors import NotFoundError

__all__ = ["NotFound"]


class NotFound(NotFoundError):
    """What was asked for is not in vcli's store (google.api_core.exceptions.NotFound's place)."""

    code = 404
