"""Training: datasets from episodes, BC, SR, GRPO (single-turn and whole episodes), and rewards for RL.

- ``training.dataset``: episodes -> filtered prompt/completion examples (the agents' own prompt function);
- ``training.base_config``: ``BaseTrainConfig``, the fields every trainer's config extends;
- ``training.model_setup``: precision, model and LoRA loading, checkpoints, saving a model spec;
- ``training.sft``: ``SFTTrainConfig`` + ``train_sft`` (TRL ``SFTTrainer``, LoRA / QLoRA / full fine-tune);
- ``training.grpo``: ``GRPOStageConfig`` + ``train_grpo`` (TRL ``GRPOTrainer`` on a task's prompts);
- ``training.episode_grpo`` + ``training.episode_rollouts``: ``EpisodeGRPOConfig`` + ``train_episode_grpo``
  (GRPO on whole episodes in ``SocialEnv``, our own loop);
- ``training.trainers``: the trainer registry (a config's ``task`` chooses the trainer of ``rl:`` and ``train run``);
- ``training.bc``, ``training.sr``, ``training.rl_stage``, ``training.evaluate``: the pipeline's stages;
- ``training.config`` + ``training.pipeline``: one YAML config, every stage, resumable;
- ``training.experts``: ``ScriptedExpert`` and ``VerifiableExpert``, model-free experts;
- ``training.rewards`` and ``training.rl``: reward functions and GRPO tasks.
"""
