"""Training: datasets from episodes, BC, SR, and rewards for RL.

- ``training.dataset``: episodes -> filtered prompt/completion examples (the agents' own prompt function);
- ``training.trainer``: ``TrainConfig`` + ``train`` (TRL ``SFTTrainer``, LoRA / QLoRA / full fine-tune);
- ``training.bc``, ``training.sr``, ``training.evaluate``: the SOTOPIA-pi stages;
- ``training.config`` + ``training.pipeline``: one YAML config, every stage, resumable;
- ``training.experts``: ``ScriptedExpert``, a model-free expert for tests and offline runs;
- ``training.rewards``: reward functions for RL.
"""
