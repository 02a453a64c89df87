"""``LLMAgent``: an agent driven by any backend."""

from __future__ import annotations

from sotopia_env.actions import ActionType, AgentAction, InvalidAction, action_json_schema, parse_action
from sotopia_env.agents.base import Usage
from sotopia_env.backends.base import Backend, Completion, GenerationSettings, raise_service_failure
from sotopia_env.limits import ANSWER_RETRIES
from sotopia_env.observation import Observation
from sotopia_env.prompt import SOTOPIA, prompt_function, render_prompt
from sotopia_env.tool_calls import TOOLS, parse_tool_call, tool_call_schema, tool_schemas
from sotopia_env.topic import TOPIC_BIAS, seat_topic_words

# The chat settings of interactive episodes (``run``, the server's simulations): greedy, with a penalty on tokens
# the reply already used, and a sampled retry of a reply that repeats an earlier turn. A small model's sampled
# words drift into nonsense or a walk-out, its greedy ones into loops (benchmarks/episode_quality.py measures the
# default episode); and a nudge toward the seat's topic words, without which it drifts off the scenario within a
# few turns (backends/topic_bias.py).
CHAT_SETTINGS = {
    "temperature": 0.0, "repetition_penalty": 1.2, "max_new_tokens": 120, "avoid_repeats": True,
    "topic_bias": TOPIC_BIAS,
}  # fmt: skip


class LLMAgent:
    """Prompts ``backend`` with ``render_prompt`` and parses the action JSON it returns (under the ``tools`` prompt,
    a TRL-trained policy's: sends the seat's tools with the request and parses the tool call it returns).

    ``prompt`` names the prompt (``sotopia_env.prompt.PROMPTS``); None takes the one the backend's model is
    prompted with (a backend's ``preferred_prompt``: the local backend's small models get ``chat``, a trained
    model directory the prompt it was trained on), else SOTOPIA's.

    The request carries the action schema (under ``tools``, the schema of a valid tool call: ``call_schema``), so
    backends that can constrain decoding do (the local backend, to one call as its chat template writes it).
    Malformed output is retried ``max_retries`` times; after that
    the agent takes a ``none`` action carrying the error, which the env counts as
    an agent error (never as stale talk). A backend whose service failed (``Completion.failure``: a key refused,
    a server down) raises ``ServiceFailure`` instead: the model never answered, so the episode is failed, not
    the agent's error. With ``settings.avoid_repeats`` the request
    names the earlier turns' arguments (the local backend won't copy runs of their
    tokens), and a reply that still repeats one word for word is retried too.

    ``last_reply`` is the completion that became the latest action (None when the action carries an error, or
    was not the agent's turn): the one call of a turn that shaped the episode, retries excluded (episode GRPO
    trains on it alone).
    """

    def __init__(
        self,
        backend: Backend,
        settings: GenerationSettings | None = None,
        max_retries: int = ANSWER_RETRIES,
        constrained: bool = True,
        prompt: str | None = None,
    ) -> None:
        self.backend = backend
        self.prompt = prompt or getattr(backend, "preferred_prompt", None) or SOTOPIA
        prompt_function(self.prompt)  # an unknown name fails here, not at the first turn
        self.settings = settings or GenerationSettings()
        self.max_retries = max_retries
        self.constrained = constrained
        self.usage = Usage()
        self.last_reply: Completion | None = None

    @property
    def model(self) -> str:
        return self.backend.model

    def reset(self) -> None:
        self.usage = Usage()

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        self.last_reply = None
        if not obs.my_turn:
            return AgentAction(action_type=ActionType.none)
        tools = tool_schemas() if self.prompt == TOOLS else None  # the reply is a tool call, not our JSON
        schema = (
            action_json_schema(obs.available_actions, obs.recipients or None, obs.choices or None)
            if self.constrained and tools is None
            else None
        )
        call_schema = (
            tool_call_schema(obs.available_actions, obs.recipients or None, obs.choices or None)
            if self.constrained and tools is not None
            else None
        )
        messages = render_prompt(obs, self.prompt)
        said = {h.argument.strip() for h in obs.history} - {""} if self.settings.avoid_repeats else set()
        # the nudge is for talk: a game's turn (a phase, a list of choices) is the model's own
        topic = seat_topic_words(obs) if self.settings.topic_bias and not (obs.phase or obs.choices) else ()
        problems = []
        repeat: tuple[AgentAction, Completion] | None = None
        for attempt in range(1 + self.max_retries):
            settings = self.settings if attempt == 0 else self.settings.for_retry()
            request = settings.request(
                messages, schema, 1000 * obs.turn + attempt, avoid_copying=tuple(sorted(said)), favour_words=topic,
                tools=tools, call_schema=call_schema,
            )  # fmt: skip
            (completion,) = await self.backend.generate([request])
            self.usage.record(completion)
            raise_service_failure(completion)  # the model never answered: not the agent's error (episode failed)
            if completion.error is not None:
                problems.append(f"backend error: {completion.error}")
                continue
            try:
                action = (
                    parse_action(completion.text)
                    if tools is None
                    else parse_tool_call(completion.text, completion.meta.get("tool_calls"))
                )
            except InvalidAction as exc:
                problems.append(str(exc))
                continue
            if action.action_type.value not in obs.available_actions:
                problems.append(f"action_type {action.action_type.value!r} is not available")
                continue
            if obs.choices and action.action_type is ActionType.action and action.argument not in obs.choices:
                problems.append(f"argument {action.argument!r} is not one of the choices")
                continue
            if action.to is not None and not (action.to and set(action.to) <= set(obs.recipients)):
                problems.append(f"to {action.to!r} names someone who cannot be addressed")
                continue
            if action.argument.strip() in said:
                repeat = action, completion  # valid, just stale: kept if no retry does better
                continue
            self.last_reply = completion
            return action
        if repeat is not None:
            action, self.last_reply = repeat
            return action
        self.usage.errors += 1
        return AgentAction.failed(f"{self.model}: no valid action after {len(problems)} attempts: {problems[-1]}")
