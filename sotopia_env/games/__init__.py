"""Games over ``SocialEnv``: roles with hidden information, phases with action masks, votes, team channels,
a rule-based game master and an exact outcome. A scenario with a ``game:`` section is a game; ``SocialEnv``
runs it with no other change, so every runner, store and trainer works on games as on talk.

- ``spec``: the declaration (``GameSpec``, ``Role``, ``Phase``) and its checks;
- ``master``: ``GameMaster``, which runs the phases, ``replay``, and ``GameRules``, what a rule set implements
  (its judge included);
- ``players``: what a rule player is; ``outcome``: ``Announcement`` and ``GameOutcome``;
- one module per rule set: ``werewolf`` and ``undercover`` (on ``teams``, what elimination games share) and
  ``negotiation``, each registered by a call (``register_game``) in the games' own registry, ``registry``, which
  ``sotopia_env.kinds.registry`` consults (``rule_set(name)`` finds kinds and games alike). Importing this package
  registers the built-in ones; an outside package's rule set comes in by an entry point in ``sotopia_env.games``.
"""

from sotopia_env.games import negotiation, undercover, werewolf  # noqa: F401  (the built-in rule sets register)
