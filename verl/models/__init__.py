"""Where a model comes from and how it is loaded and called: the models room of the ground floor.

- :mod:`verl.utils.models.hub`: hub ids (``org/name[@revision]``) resolved to a local snapshot, downloaded at most
  once per machine; the one-line path errors (:class:`~verl.utils.models.hub.ModelPathError`,
  :class:`~verl.utils.models.hub.DatasetPathError`);
- :mod:`verl.utils.models.loader`: model paths (local, bundled, hub id) to a local directory
  (:func:`~verl.utils.models.loader.resolve_model_path`), loading causal LMs, value models and tokenizers, and
  calling any module for logits / values (:func:`~verl.utils.models.loader.forward_logits`);
- :mod:`verl.utils.models.lora`: LoRA adapters through PEFT, wrapped and merged back into plain weights;
- :mod:`verl.utils.models.tiny`: tiny random models and a byte-level tokenizer built locally (tests, examples,
  benchmarks).

The package imports nothing itself: each module is imported where it is used (transformers is heavy).
"""
