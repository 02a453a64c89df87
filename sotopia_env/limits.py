"""The turn limit's default and ceiling, declared once for the env (``EnvConfig``) and every job that sets it
(``episodes.job_fields``: ``run``, ``benchmark``, the server's simulations)."""

DEFAULT_MAX_TURNS = 20
MAX_TURNS_LIMIT = 1000  # the most a run, a benchmark or a simulation may ask for
