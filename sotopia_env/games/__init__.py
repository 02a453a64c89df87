"""Games over ``SocialEnv``: roles with hidden information, phases with action masks, votes, team channels,
a rule-based game master and an exact outcome. A scenario with a ``game:`` section is a game; ``SocialEnv``
runs it with no other change, so every runner, store and trainer works on games as on talk.

- ``spec``: the declaration (``GameSpec``, ``Role``, ``Phase``) and its checks;
- ``master``: ``GameMaster``, which runs the phases, ``replay``, and ``GameRules``, what a rule set implements
  (its judge included);
- ``players``: what a rule player is; ``outcome``: ``Announcement`` and ``GameOutcome``;
- one module per rule set: ``werewolf`` and ``undercover`` (on ``teams``, what elimination games share) and
  ``negotiation``. Rule sets are registered with the verifiable kinds (``sotopia_env.kinds.registry``).
"""
