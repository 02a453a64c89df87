"""A single-agent ``gymnasium.Env``: the learner holds one seat, a fixed partner the other.

Registered as ``sotopia_env/Social-v0``. Observation and action are text.

Observation: exactly the prompt an ``LLMAgent`` sends and the training data holds.
``info["messages"]`` is ``sotopia_env.prompt.render_prompt(observation, prompt)``, the chat
messages (``prompt``: SOTOPIA's by default; ``"chat"`` for a small local model, as its
agent is prompted), and the observation string is those messages rendered by
``sotopia_env.prompt.prompt_text``: with ``tokenizer`` (anything with
``apply_chat_template``, e.g. a transformers tokenizer or ``LocalBackend.tokenizer``)
its chat template with the generation prompt, byte for byte what the local backend
feeds the model; without one a plain, deterministic ``role: content`` rendering.
Chat-based learners read ``info["messages"]``, completion-based ones the string.

Action: the action JSON, e.g. ``{"action_type": "speak", "argument": "Hi"}``.
Invalid action text does not raise: it counts as the learner's failed action
and ``info["error"]`` says what was wrong. ``action_space.sample()`` gives valid
action JSON (never ``leave``), so a random policy plays whole episodes.

Reward: the sum of two parts, both listed in ``info``.

- ``info["env_reward"]``: the env's own reward for the learner: 0.0 until the
  last step, then ``evaluator``'s score on ``config.reward_dimension`` (goal by
  default). Without an evaluator, or when the evaluator could not rate the
  episode, it is NaN and ``info["evaluation"]`` is ``{"error": ...}``: there is
  no placeholder default. Pass ``RuleBasedEvaluator()`` explicitly for offline
  smoke runs, an ``LLMEvaluator`` for real ratings.
- ``info["shaping"]``: one value per ``reward_fns`` hook, each called as
  ``fn(obs, action, info)`` after every step (the step's returned observation
  string, the learner's action text, this step's info). A hook returning
  ``None`` or NaN rated nothing: it is recorded as ``None`` and adds nothing.

``info["rated"]`` is False exactly when the reward is NaN: the last step of an
unrated episode, whatever the hooks said (shaping never hides a missing
rating). RL code should drop or mask such episodes, never count them as 0.

The partner is any object with ``act(observation) -> action`` (sync or async,
receiving an ``Observation``), e.g. an ``LLMAgent``. The default,
``CannedPartner``, says a few fixed lines and leaves; it exists so the env works
with no LLM at all.

Notes on ``gymnasium.utils.env_checker.check_env``: it passes. Two of its
checks are vacuous for text spaces and say nothing about this env: the
observation-space bounds checks (a ``Text`` space has no low/high) and the
dtype checks (text has no dtype).
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episode_setup import EpisodeSetup, reset_for_episode
from sotopia_env.evaluators.base import Evaluator
from sotopia_env.observation import Observation
from sotopia_env.prompt import SOTOPIA, prompt_function, prompt_text, render_prompt
from sotopia_env.spaces import ActionText, FreeText

RewardFn = Callable[[str, str, dict[str, Any]], float | None]


class CannedPartner:
    """Says its lines in order, then leaves."""

    def __init__(self, lines: tuple[str, ...] = ("Hello.", "I see. Tell me more.", "Let me think about that.")):
        self.lines = lines
        self._i = 0

    def reset(self) -> None:
        self._i = 0

    def act(self, observation: Observation) -> AgentAction:
        if self._i >= len(self.lines):
            return AgentAction(action_type=ActionType.leave, argument="")
        self._i += 1
        return AgentAction(action_type=ActionType.speak, argument=self.lines[self._i - 1])


def _call_partner(partner: Any, observation: Observation) -> Any:
    result = partner.act(observation)
    if inspect.isawaitable(result):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(result)  # type: ignore[arg-type]
        raise RuntimeError("an async partner cannot be driven from inside a running event loop; use SocialEnv")
    return result


def _rated(value: float | None) -> float | None:
    """A hook's value, or None when it rated nothing (None or NaN)."""
    return None if value is None or math.isnan(value) else float(value)


class SingleAgentSocialEnv(gym.Env):
    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        partner: Any = None,
        learner_seat: int = 0,
        setup: EpisodeSetup | None = None,
        evaluator: Evaluator | None = None,
        config: EnvConfig | None = None,
        render_mode: str | None = None,
        reward_fns: Sequence[RewardFn] = (),
        tokenizer: Any = None,
        prompt: str = SOTOPIA,
    ) -> None:
        prompt_function(prompt)  # an unknown name fails here
        self.prompt = prompt
        self.env = SocialEnv(setup=setup, evaluator=evaluator, config=config)
        self.partner = partner if partner is not None else CannedPartner()
        self.learner_seat = learner_seat
        self.render_mode = render_mode
        self.reward_fns = list(reward_fns)
        self.tokenizer = tokenizer
        self.observation_space = FreeText()
        self.action_space = ActionText(max_length=4000)

    @property
    def learner(self) -> str:
        """The learner's seat id in ``self.env`` (``agent_0`` or ``agent_1``); its character: ``learner_name``."""
        return self.env.possible_agents[self.learner_seat]

    @property
    def partner_id(self) -> str:
        """The partner's seat id in ``self.env``."""
        return self.env.possible_agents[1 - self.learner_seat]

    @property
    def learner_name(self) -> str:
        return self.env.name_of(self.learner)

    @property
    def partner_name(self) -> str:
        return self.env.name_of(self.partner_id)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if len(self.env.possible_agents) != 2:
            raise ValueError("SingleAgentSocialEnv needs a two-agent scenario")
        obs, infos = self.env.reset(seed=seed, options=options)
        reset_for_episode(self.partner, self.env.setup, 1 - self.learner_seat)
        obs, _, _, _, infos = self._advance_partner(obs, infos)
        text, messages = self._observe(obs)
        return text, {"turn": self.env.turn, "messages": messages}

    def _observe(self, obs: dict) -> tuple[str, list[dict[str, str]]]:
        """The learner's observation as ``render_prompt`` messages and as their rendered string."""
        messages = render_prompt(Observation.from_env(obs[self.learner]), self.prompt)
        return prompt_text(messages, self.tokenizer), messages

    def _advance_partner(self, obs: dict, infos: dict) -> tuple[dict, dict, dict, dict, dict]:
        """Let the partner act while it is the partner's turn alone."""
        rewards = dict.fromkeys(self.env.agents, 0.0)
        terms = dict.fromkeys(self.env.agents, False)
        truncs = dict.fromkeys(self.env.agents, False)
        while self.env.agents and not infos[self.learner]["acting"]:
            partner_action = _call_partner(self.partner, Observation.from_env(obs[self.partner_id]))
            obs, rewards, terms, truncs, infos = self.env.step(
                {self.partner_id: partner_action, self.learner: {"action_type": "none", "argument": ""}}
            )
        return obs, rewards, terms, truncs, infos

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        actions: dict[str, Any] = {self.learner: action}
        if self.partner_id in self.env.acting:  # simultaneous order: the partner acts in the same step
            actions[self.partner_id] = _call_partner(
                self.partner, Observation.from_env(self.env.observe(self.partner_id))
            )
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        error = infos[self.learner]["last_error"]
        if self.env.agents:
            obs, rewards, terms, truncs, infos = self._advance_partner(obs, infos)
        text, messages = self._observe(obs)
        env_reward = float(rewards[self.learner])
        info = dict(infos[self.learner])
        info.update(error=error, messages=messages, env_reward=env_reward)
        info["shaping"] = shaping = [_rated(fn(text, action, info)) for fn in self.reward_fns]
        reward = env_reward + sum(v for v in shaping if v is not None)
        info["rated"] = not math.isnan(reward)
        return text, reward, terms[self.learner], truncs[self.learner], info

    def render(self) -> str | None:
        return self.env.render()


__all__ = ["SingleAgentSocialEnv", "CannedPartner", "RewardFn"]
