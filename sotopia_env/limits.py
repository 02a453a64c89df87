"""The defaults and limits shared across layers, each declared once, here at the bottom so that every layer may
import it (``tests/test_defaults.py`` fails on a second declaration).

- The turn limit: ``EnvConfig``, and every job that sets it (``episodes.job_fields``: ``run``, ``benchmark``, the
  server's simulations), the training rows and the OpenEnv server.
- Work in flight at once: episodes of a batch, ratings of ``episodes rate``, items of a generation run, a
  pipeline's evaluations and the server's model calls.
- The OpenEnv server's sessions at once (``server.openenv_app``, ``sotopia-env openenv``).
- Retries of a malformed answer: an ``LLMAgent``'s move, an ``LLMEvaluator``'s rating, a trained seat's move.

The other homes: the fields jobs share (store retry, benchmark limits, serve's caps) in ``episodes.job_fields``;
a remote backend's timeout, retries and backoff in ``backends.remote``.
"""

DEFAULT_MAX_TURNS = 20
MAX_TURNS_LIMIT = 1000  # the most a run, a benchmark or a simulation may ask for
DEFAULT_CONCURRENCY = 8  # episodes (ratings, generations) in flight at once
MAX_CONCURRENCY = 100_000
DEFAULT_MAX_SESSIONS = 64  # the OpenEnv server's episodes (WebSockets) at once
ANSWER_RETRIES = 2  # a malformed answer is asked for again this many times: three tries in all
