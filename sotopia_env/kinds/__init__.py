"""Verifiable kinds: scenarios whose outcome rules can check, each kind one module, in a registry games share.

A verifiable scenario (``Scenario.verifiable``) holds hidden facts: a reservation price, acceptable slots, a
concern. Seat 1 is the learner, seat 2 the rule partner (agent spec ``rule-partner``); the ``verifiable``
evaluator replays the transcript through the same rules and scores the goal exactly. One module per kind holds
everything about it (``sotopia_env.kinds.base`` says what):

- ``bargaining``: an offer is the one number in a speech; the partner hides its reservation price;
- ``scheduling``: a proposal is the one slot named; the partner hides the days and times it cannot do and
  answers a question about one of them;
- ``persuasion``: the partner hides a concern (drawn per episode) behind cue lines and agrees to its remedy, asked;
- ``split``: an offer names the learner's count of every item type; the partner hides its values and threshold.

``sotopia_env.kinds.registry`` finds them by name, with the games' rule sets (``sotopia_env.games.registry``).
Add a kind with one module: a ``Kind`` subclass and ``KIND = register_kind(MyKind())`` (or an entry point in
``sotopia_env.kinds``); see CONTRIBUTING.md. Importing this package registers the built-in kinds.
"""

from sotopia_env.kinds import bargaining, persuasion, scheduling, split  # noqa: F401  (the built-in kinds register)
from sotopia_env.kinds.base import (
    LEARNER_SEAT,
    PARTNER_SEAT,
    Exchange,
    Kind,
    LearnerView,
    Move,
    Outcome,
    RuleSet,
    Talk,
    Verdict,
    VerifiableFacts,
)
from sotopia_env.kinds.registry import (
    KindError,
    NotVerifiable,
    facts_of,
    kind_for,
    register_kind,
    require_verifiable,
    rule_set,
    rule_sets,
    rules_of,
    unregister_kind,
    validate_facts,
)

__all__ = [
    "LEARNER_SEAT",
    "PARTNER_SEAT",
    "Exchange",
    "Kind",
    "KindError",
    "LearnerView",
    "Move",
    "NotVerifiable",
    "Outcome",
    "RuleSet",
    "Talk",
    "Verdict",
    "VerifiableFacts",
    "facts_of",
    "kind_for",
    "register_kind",
    "require_verifiable",
    "rule_set",
    "rule_sets",
    "rules_of",
    "unregister_kind",
    "validate_facts",
]
