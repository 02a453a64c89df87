"""RL (GRPO) tasks: a prompt dataset plus TRL reward functions, looked up by name (see ``training.rl.tasks``)."""

from sotopia_env.training.rl.tasks import RLTask, TaskError, build_task, register_task, task_names

__all__ = ["RLTask", "TaskError", "build_task", "register_task", "task_names"]
