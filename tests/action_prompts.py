"""Short first-turn prompts in the style of ``LLMAgent``'s, for the local-backend tests and the batching
benchmark (plain functions, no pytest: ``benchmarks/local_batching.py`` imports them too)."""

from __future__ import annotations

from sotopia_env.actions import ACTION_TYPES

ASKS = (
    "Hi! Do you have a minute?",
    "Could you lend me your car this weekend?",
    "I think we should split the bill.",
    "Are you coming to the party tonight?",
    "I found your wallet on the bus.",
    "Can you help me move on Saturday?",
    "The rent is due tomorrow.",
    "Let's plan the trip together.",
)


def action_prompt(name: str, heard: str, turn: int = 1) -> list[dict[str, str]]:
    """What an agent called ``name`` sees after hearing ``heard``: about 120 tokens with SmolLM2's template."""
    options = "\n".join(f'- "{a}"' for a in ACTION_TYPES)
    user = (
        f'Conversation so far:\nSam said: "{heard}"\n\nIt is turn #{turn} and your move. Choose one action:\n'
        f'{options}\n\nReply with one JSON object only: {{"action_type": "...", "argument": "..."}}'
    )
    system = f"You are playing {name} in a social simulation. Stay in character.\n\n{name} is a friendly teacher."
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]
