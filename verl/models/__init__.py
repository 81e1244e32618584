"""Where a model comes from and how it is loaded and called (verl's ``verl.utils.models``, the same modules).

- :mod:`verl.models.hub`: hub ids (``org/name[@revision]``) resolved to a local snapshot, downloaded at most
  once per machine; the one-line path errors (:class:`~verl.models.hub.ModelPathError`,
  :class:`~verl.models.hub.DatasetPathError`);
- :mod:`verl.models.loader`: model paths (local, bundled, hub id) to a local directory
  (:func:`~verl.models.loader.resolve_model_path`), loading causal LMs, value models and tokenizers, and
  calling any module for logits / values (:func:`~verl.models.loader.forward_logits`);
- :mod:`verl.models.lora`: LoRA adapters through PEFT, wrapped and merged back into plain weights;
- :mod:`verl.models.tiny`: tiny random models and a byte-level tokenizer built locally (tests, examples,
  benchmarks).

The package imports nothing itself: each module is imported where it is used (transformers is heavy).
"""
