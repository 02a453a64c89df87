"""Games over ``SocialEnv``: roles with hidden information, phases with action masks, votes, team channels,
a rule-based game master and an exact outcome. A scenario with a ``game:`` section is a game; ``SocialEnv``
runs it with no other change, so every runner, store and trainer works on games as on talk.

- ``spec``: the declaration (``GameSpec``, ``Role``, ``Phase``) and its checks;
- ``master``: ``GameMaster``, which runs the phases, and ``replay``;
- ``rules``: werewolf, undercover and negotiation;
- ``outcome``: ``Announcement`` and ``GameOutcome``.
"""
