"""One-step-off-policy training (upstream verl's ``verl/experimental/one_step_off_policy``): docs/async_training.md."""
