"""Fully asynchronous training (upstream verl's ``verl/experimental/fully_async_policy``): docs/async_training.md."""
