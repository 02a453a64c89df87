"""Training: datasets from episodes, BC, SR, and rewards for RL."""
