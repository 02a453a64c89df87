"""A single-agent ``gymnasium.Env``: the learner holds one seat, a fixed partner the other.

Registered as ``sotopia_env/Social-v0``. Observation and action are text:
the observation is the learner's rendered observation (``Observation.text``), the
action is the action JSON, e.g. ``{"action_type": "speak", "argument": "Hi"}``.
Invalid action text does not raise: it counts as the learner's failed action
and ``info["error"]`` says what was wrong.

Rewards come from ``evaluator``. Without one, the wrapper uses the
``RuleBasedEvaluator``: a deterministic placeholder (goal = 2 per spoken turn)
that lets RL code run offline; pass an ``LLMEvaluator`` for real ratings.

The partner is any object with ``act(observation) -> action`` (sync or async,
receiving an ``Observation``). The default, ``CannedPartner``, says a few
fixed lines and leaves; it exists so the env works with no LLM at all.

Notes on ``gymnasium.utils.env_checker.check_env``: it passes. Two of its
checks are vacuous for text spaces and say nothing about this env: the
observation-space bounds checks (a ``Text`` space has no low/high) and the
dtype checks (text has no dtype).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import gymnasium as gym

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.evaluation import Evaluator, RuleBasedEvaluator
from sotopia_env.observation import Observation
from sotopia_env.sampler import EpisodeSetup
from sotopia_env.spaces import FreeText


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
    ) -> None:
        self.env = SocialEnv(setup=setup, evaluator=evaluator or RuleBasedEvaluator(), config=config)
        self.partner = partner if partner is not None else CannedPartner()
        self.learner_seat = learner_seat
        self.render_mode = render_mode
        self.observation_space = FreeText()
        self.action_space = FreeText(max_length=4000)

    @property
    def learner(self) -> str:
        return self.env.possible_agents[self.learner_seat]

    @property
    def partner_name(self) -> str:
        return self.env.possible_agents[1 - self.learner_seat]

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        obs, infos = self.env.reset(seed=seed, options=options)
        if len(self.env.possible_agents) != 2:
            raise ValueError("SingleAgentSocialEnv needs a two-agent scenario")
        if hasattr(self.partner, "reset"):
            self.partner.reset()
        obs, _, _, _, infos = self._advance_partner(obs, infos)
        return obs[self.learner]["text"], {"turn": self.env.turn}

    def _advance_partner(self, obs: dict, infos: dict) -> tuple[dict, dict, dict, dict, dict]:
        """Let the partner act while it is the partner's turn alone."""
        rewards = dict.fromkeys(self.env.agents, 0.0)
        terms = dict.fromkeys(self.env.agents, False)
        truncs = dict.fromkeys(self.env.agents, False)
        while self.env.agents and not infos[self.learner]["acting"]:
            partner_action = _call_partner(self.partner, Observation.from_env(obs[self.partner_name]))
            obs, rewards, terms, truncs, infos = self.env.step(
                {self.partner_name: partner_action, self.learner: {"action_type": "none", "argument": ""}}
            )
        return obs, rewards, terms, truncs, infos

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        actions: dict[str, Any] = {self.learner: action}
        if self.partner_name in self.env._acting:  # simultaneous order: the partner acts in the same step
            partner_obs = Observation.from_env(self.env._observations()[self.partner_name])
            actions[self.partner_name] = _call_partner(self.partner, partner_obs)
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        error = infos[self.learner]["last_error"]
        if self.env.agents:
            obs, rewards, terms, truncs, infos = self._advance_partner(obs, infos)
        info = dict(infos[self.learner])
        info["error"] = error
        reward = rewards[self.learner]
        return obs[self.learner]["text"], float(reward), terms[self.learner], truncs[self.learner], info

    def render(self) -> str | None:
        return self.env.render()


__all__ = ["SingleAgentSocialEnv", "CannedPartner"]
