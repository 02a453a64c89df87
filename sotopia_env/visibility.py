"""What each agent may know about the others, following their relationship.

- stranger: nothing, not even the name;
- know_by_name: the name;
- acquaintance: the name and public facts (age, gender, occupation, public info);
- friend, romantic_relationship, family_member: everything but the secret.

An agent always sees its own full profile and its own goal, never another
agent's goal. The evaluator alone sees everything (``omniscient_background``).
"""

from __future__ import annotations

from sotopia_env.profiles import Character, Relationship

NOBODY = "the other person"


def display_name(character: Character, relationship: Relationship, seat: int, num_agents: int) -> str:
    """How a viewer refers to ``character``."""
    if relationship >= Relationship.know_by_name:
        return character.name
    return NOBODY if num_agents == 2 else f"person {seat + 1}"


def describe(character: Character, relationship: Relationship | None) -> str:
    """A character as seen at ``relationship``; ``None`` means omniscient (secret included)."""
    level = Relationship.family_member if relationship is None else relationship
    if level < Relationship.know_by_name:
        return "You know nothing about them."
    parts = [f"Name: {character.name}."]
    if level >= Relationship.acquaintance:
        parts.append(
            f"{character.age}-year-old {character.gender.lower()} {character.occupation.lower()}, "
            f"pronouns {character.pronouns}."
        )
        if character.public_info:
            parts.append(character.public_info)
    if level >= Relationship.friend:
        b5 = character.big_five
        parts.append(
            f"Personality: openness {b5.openness}, conscientiousness {b5.conscientiousness}, "
            f"extraversion {b5.extraversion}, agreeableness {b5.agreeableness}, neuroticism {b5.neuroticism}."
        )
        if character.moral_values:
            parts.append(f"Moral values: {', '.join(character.moral_values)}.")
        if character.schwartz_values:
            parts.append(f"Values: {', '.join(character.schwartz_values)}.")
        if character.decision_making_style:
            parts.append(f"Decision-making style: {character.decision_making_style}.")
    if relationship is None and character.secret:
        parts.append(f"Secret: {character.secret}")
    return " ".join(parts)
