"""The seat session (``training.seat_session``), the core of the TRL, OpenEnv and verl adapters: refusals, an
episode the caller stops driving, a game's choices, and an episode the judge cannot rate (None, never 0)."""

from __future__ import annotations

import asyncio

from sotopia_env.training.seat_rows import SeatRow, SessionMaker, seat_rows


def test_a_stopped_episode_ends_as_an_agent_error_and_is_rated():
    async def go():
        session = SessionMaker().open(seat_rows("verifiable-bargaining-bike")[0])
        first = await session.start()
        assert first.update.startswith("It is turn #0") and first.messages[0]["role"] == "system"
        turn = await session.step({"action_type": "speak", "argument": "Would you take $240?"})
        assert 'said: "Would you take $240?"' in turn.update and not turn.done
        log = await session.finish()
        return session, log

    session, log = asyncio.run(go())
    assert log.termination_reason == "agent_error" and session.turn.done
    assert session.reward == 0.0 and log.rating.rated  # no deal: the judge's 0, rated


def test_unrated_is_none_never_zero():
    row = SeatRow(scenario="multi-party-chore-rota", seat=0, partners=["seat_agents:Whisperer"], evaluator="verifiable")

    async def go():
        session = SessionMaker().open(row)
        turn = await session.start()
        while not turn.done:
            turn = await session.step({"action_type": "leave", "argument": "Bye."})
        return turn

    turn = asyncio.run(go())
    assert turn.done and turn.reward is None and "could not be rated" in turn.update


def test_a_game_move_outside_the_choices_is_refused():
    (row,) = [r for r in seat_rows("werewolf:train") if r.seat == 0][:1]

    async def go():
        session = SessionMaker().open(row)
        turn = await session.start()
        while not turn.observation.choices and not turn.done:
            allowed = turn.observation.available_actions
            kind = "speak" if "speak" in allowed else allowed[0]
            turn = await session.step({"action_type": kind, "argument": "I trust everyone here."})
        if turn.done:
            return None, None
        refused = await session.step({"action_type": "action", "argument": "vote for nobody at all"})
        chosen = await session.step({"action_type": "action", "argument": turn.observation.choices[0]})
        return refused, chosen

    refused, chosen = asyncio.run(go())
    assert refused is not None, "the seat never had a choice to make"
    assert "is not one of the choices" in refused.error and not refused.done
    assert chosen.error is None
