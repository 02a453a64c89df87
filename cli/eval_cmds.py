"""``sotopia-env eval socialiqa``: accuracy, format-valid rate and mean reward of a model on Social IQa."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer

from sotopia_env.cli.common import check_output_file, console, fail, user_errors
from sotopia_env.cli.options import ApiBase, model_servers
from sotopia_env.specs import DEFAULT_MODEL

eval_app = typer.Typer(help="Evaluate models on social-reasoning tasks.", no_args_is_help=True)

# <think>...</think><answer>(X) ...</answer>: what the constrained run forces the model to emit.
THINK_ANSWER_REGEX = r"<think>[^<]{1,600}</think><answer>\([ABC]\) [^<()\n]{0,120}</answer>"


@eval_app.command("socialiqa")
def socialiqa(
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="Model spec (local alias/path or litellm string)."),
    data: Path = typer.Option(..., "--data", help="Social IQa JSONL (context, question, answerA..C, label)."),
    limit: int = typer.Option(None, "--limit", min=1, help="Only the first N items."),
    constrained: bool = typer.Option(False, "--constrained", help="Force the <think>/<answer> format (local only)."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", min=8),
    temperature: float = typer.Option(0.0, "--temperature", min=0.0),
    out: Path = typer.Option(None, "--out", help="Per-item results JSONL (default: socialiqa-<model>.jsonl)."),
    api_base: list[str] = ApiBase,
) -> None:
    """Accuracy with a 95% interval, format-valid rate and mean reward; per-item results as JSONL."""
    from sotopia_env.backends.resolve import is_local_spec, resolve_backend
    from sotopia_env.episodes.preflight import PreflightFailed, check_services
    from sotopia_env.training.rewards import evaluate_socialiqa, load_socialiqa
    from sotopia_env.training.rewards.socialiqa_eval import answer_socialiqa

    out = out or Path(f"socialiqa-{Path(model).name}{'-constrained' if constrained else ''}.jsonl")
    check_output_file(out, "--out")
    with user_errors(ValueError, OSError):
        items = load_socialiqa(data)[:limit]
        if constrained and not is_local_spec(model):
            raise ValueError("--constrained needs a local model (regex-constrained decoding runs in-process)")
        backend = resolve_backend(model, api_base=model_servers(api_base))
    with user_errors(PreflightFailed):  # a wrong key or a dead server: one line, exit 1
        check_services([backend])
    regex = THINK_ANSWER_REGEX if constrained else None
    completions = asyncio.run(
        answer_socialiqa(backend, items, regex=regex, temperature=temperature, max_new_tokens=max_new_tokens)
    )
    outage = [c.error for c in completions if c.failure is not None]
    if outage:  # an item the model never answered is not a wrong answer: no accuracy from a partial outage
        raise fail(f"{len(outage)} of {len(completions)} items got no answer (the model service failed): {outage[0]}")
    errors = [c.error for c in completions if c.error]
    if len(errors) == len(completions):
        raise fail(f"every generation failed: {errors[0]}")
    result = evaluate_socialiqa(items, [c.text for c in completions])
    low, high = result["accuracy_ci95"]
    console.print(
        f"{model}{' (constrained)' if constrained else ''} on {result['n']} items: "
        f"accuracy {result['accuracy']:.3f} [95% CI {low:.3f}, {high:.3f}], "
        f"format-valid {result['format_valid_rate']:.3f}, mean reward {result['mean_reward']:.3f}, "
        f"generation errors {len(errors)}"
    )
    with out.open("w") as fh:
        for row, completion in zip(result["items"], completions, strict=True):
            fh.write(json.dumps({**row, "completion": completion.text, "error": completion.error}) + "\n")
    console.print(f"wrote {out}")
