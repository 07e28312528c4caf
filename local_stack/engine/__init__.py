"""What both services compute with: the tiny model and its vocabulary, the sampler, the LoRA
trainer, checkpoints on disk, and the one compute thread they share."""
