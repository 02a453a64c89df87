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

``info["observation"]`` is the learner's ``Observation``, the one typed view the
string and the messages render (what an agent of ours acts on).

The partner is any object with ``act(observation) -> action`` (sync or async,
receiving an ``Observation``), e.g. an ``LLMAgent``. The default,
``CannedPartner``, says a few fixed lines and leaves; it exists so the env works
with no LLM at all.

The episode is played by the one episode loop (``sotopia_env.seat_driver.drive``,
under ``episodes.runner.play`` too) with the learner's seat a ``DrivenSeat``, the
seat driver under TRL's environment, the OpenEnv server and verl's loop: ``reset``
and ``step`` run that loop on an event loop of the env's own (on a worker thread
when called from inside a running event loop, e.g. a notebook's) up to the
learner's next move or the end. ``close`` abandons an unfinished episode.

Notes on ``gymnasium.utils.env_checker.check_env``: it passes. Two of its
checks are vacuous for text spaces and say nothing about this env: the
observation-space bounds checks (a ``Text`` space has no low/high) and the
dtype checks (text has no dtype).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import gymnasium as gym

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.env import EnvConfig, SocialEnv
from sotopia_env.episode_setup import EpisodeSetup, reset_for_episode
from sotopia_env.evaluators.base import Evaluator
from sotopia_env.observation import Observation
from sotopia_env.prompt import SOTOPIA, prompt_function, prompt_text, render_prompt
from sotopia_env.seat_driver import DrivenSeat, Step, drive
from sotopia_env.spaces import ActionText, FreeText

RewardFn = Callable[[str, str, dict[str, Any]], float | None]
T = TypeVar("T")


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
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[Step | None] | None = None  # the episode being played
        self._seat: DrivenSeat | None = None
        self._last: Step = ({}, {}, {}, {}, {})  # the env's last (reset or) step

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
        self._abandon()
        obs, infos = self.env.reset(seed=seed, options=options)
        reset_for_episode(self.partner, self.env.setup, 1 - self.learner_seat)
        self._last = (obs, dict.fromkeys(self.env.agents, 0.0), {}, {}, infos)
        self._seat = DrivenSeat()
        agents = [self._seat, self.partner] if self.learner_seat == 0 else [self.partner, self._seat]
        self._task = self._loop.create_task(drive(self.env, agents, obs, infos, on_step=self._stepped))
        self._run(self._seat.next(self._task))
        text, messages, observation = self._observe()
        return text, {"turn": self.env.turn, "messages": messages, "observation": observation}

    def _stepped(self, result: Step) -> None:
        self._last = result

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the env's own event loop: here, or on a worker thread inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self._loop.run_until_complete(coro)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(self._loop.run_until_complete, coro).result()

    def _observe(self) -> tuple[str, list[dict[str, str]], Observation]:
        """The learner's observation, as ``render_prompt`` messages and as their rendered string."""
        observation = Observation.from_env(self._last[0][self.learner])
        messages = render_prompt(observation, self.prompt)
        return prompt_text(messages, self.tokenizer), messages, observation

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._task is None or self._task.done():
            raise RuntimeError("step() called on a finished episode; call reset() first")
        assert self._seat is not None
        self._seat.moves.put_nowait(action)  # the learner's move, as it came (the env reports what is invalid)
        self._run(self._seat.next(self._task))  # the partner moves up to the learner's next move, or the end
        _, rewards, terms, truncs, infos = self._last
        text, messages, observation = self._observe()
        env_reward = float(rewards[self.learner])
        info = dict(infos[self.learner])
        info.update(error=info["last_error"], messages=messages, observation=observation, env_reward=env_reward)
        info["shaping"] = shaping = [_rated(fn(text, action, info)) for fn in self.reward_fns]
        reward = env_reward + sum(v for v in shaping if v is not None)
        info["rated"] = not math.isnan(reward)
        return text, reward, terms[self.learner], truncs[self.learner], info

    def _abandon(self) -> None:
        """Stop playing an unfinished episode."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            self._run(asyncio.wait({self._task}))
        self._task, self._seat = None, None

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._abandon()
        self._loop.close()

    def __del__(self) -> None:
        if "_loop" in self.__dict__:  # an env whose __init__ failed has nothing to close
            try:
                self.close()
            except Exception:  # at interpreter exit, or a partner that breaks while cancelled: nothing to save
                pass

    def render(self) -> str | None:
        return self.env.render()


__all__ = ["SingleAgentSocialEnv", "CannedPartner", "RewardFn"]
