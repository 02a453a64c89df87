"""Expert episodes that already exist (``bc.source``): a store tag, or an imported file.

Then behaviour cloning needs no expert model and no judge: e.g. the released SOTOPIA-pi GPT-4 episodes
(``experiment_episodes.json``) can be cloned without any API key.

Splits. An episode keeps the split its scenario records (ours record it; SOTOPIA's layouts have none, so
their scenarios are ``train``), except that an episode whose scenario id or codename is a ``test``
scenario of the library counts as ``test``: then the dataset builder refuses it, as it refuses every
test episode. A SOTOPIA scenario the library does not know is not held out by anything here; keep
SOTOPIA's own test scenarios out of the file yourself.

Ratings. The rating filters (``top1_per_scenario_role``, ``min_goal``) need rated episodes. Episodes
imported unrated (SOTOPIA-pi's release has no ratings; it was filtered already) are cloned as they are
when both filters are off.
"""

from __future__ import annotations

from collections import Counter

from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.library import Library
from sotopia_env.training.config import ConfigError, EpisodeSource
from sotopia_env.training.dataset import FilterConfig


def read_source(source: EpisodeSource, store: EpisodeStore, where: str) -> list[EpisodeLog]:
    """The source's episodes; ConfigError (naming ``where``, the config field) if it has none or cannot be read."""
    if source.tag is not None:
        logs = list(store.iter(source.tag))
        if not logs:
            raise ConfigError(f"{where}: no episodes with tag {source.tag!r} in {store.url}")
        return logs
    assert source.path is not None
    try:
        if (source.format or "jsonl") == "sotopia":
            from sotopia_env.episodes.sotopia_public import read_sotopia

            logs = read_sotopia(source.path)
        else:
            from sotopia_env.episodes.export import import_jsonl

            logs = import_jsonl(source.path)
    except ValueError as exc:  # the readers' errors name the file, line and field
        raise ConfigError(f"{where}: {exc}") from None
    if not logs:
        raise ConfigError(f"{where}: {source.path} holds no episodes")
    return logs


def with_library_splits(logs: list[EpisodeLog], library: Library) -> list[EpisodeLog]:
    """``logs``, those whose scenario id or codename is a library ``test`` scenario marked ``test``."""
    test = {s.id for s in library.scenarios.values() if s.split == "test"}
    test |= {s.codename for s in library.scenarios.values() if s.split == "test" and s.codename}
    out = []
    for log in logs:
        scenario = log.setup.scenario
        if scenario.split != "test" and (scenario.id in test or scenario.codename in test):
            setup = log.setup.model_copy(update={"scenario": scenario.model_copy(update={"split": "test"})})
            log = log.model_copy(update={"setup": setup})
        out.append(log)
    return out


def keep_unrated(logs: list[EpisodeLog], filters: FilterConfig, where: str) -> bool:
    """Whether the dataset may use unrated episodes: only with the rating filters off. ConfigError when the
    filters are on and no episode is rated (which would give an empty dataset)."""
    if not filters.uses_ratings:
        return True
    if not any(log.status == "rated" for log in logs):
        counts = ", ".join(f"{n} {status}" for status, n in sorted(Counter(log.status for log in logs).items()))
        raise ConfigError(
            f"{where}: none of its episodes is rated ({counts}), but bc.filter ranks by rating; "
            "set bc.filter.top1_per_scenario_role: false and min_goal: null to clone them as they are"
        )
    return False


def status_counts(logs: list[EpisodeLog]) -> dict[str, int]:
    """``total`` and each status's count, as the stage result reports episodes."""
    counts = Counter(log.status for log in logs)
    return {"total": len(logs), **{status: counts[status] for status in ("rated", "unrated", "failed")}}
