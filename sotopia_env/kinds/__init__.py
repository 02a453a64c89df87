"""Verifiable kinds: scenarios whose outcome rules can check, each kind one module, in a registry games share.

A verifiable scenario (``Scenario.verifiable``) holds hidden facts: a reservation price, acceptable slots, a
concern. Seat 1 is the learner, seat 2 the rule partner (agent spec ``rule-partner``); the ``verifiable``
evaluator replays the transcript through the same rules and scores the goal exactly. One module per kind holds
everything about it (``sotopia_env.kinds.base`` says what):

- ``bargaining``: an offer is the one number in a speech; the partner hides its reservation price;
- ``scheduling``: a proposal is the one slot named; the partner hides the slots it can do;
- ``persuasion``: the partner agrees once the learner has answered its hidden concern, then asked.

``sotopia_env.kinds.registry`` finds them by name, with the games' rule sets (``sotopia_env.games``). Add a
kind with one module: a ``Kind`` subclass and ``register_kind`` (or an entry point in ``sotopia_env.kinds``); see
CONTRIBUTING.md.
"""

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
