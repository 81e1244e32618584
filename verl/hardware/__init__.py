"""The hardware a run is on: what a device computes fast, how fast, and how well a step uses it.

- :mod:`verl.hardware.precision`: which compute dtype ``dtype: auto`` means on a device (bf16 only where it
  multiplies bf16 natively), :func:`~verl.hardware.precision.resolve_dtype`;
- :mod:`verl.hardware.peak`: the device's peak FLOP/s for MFU (the GPU datasheet table, else measured at the
  model's matmul shapes), :func:`~verl.hardware.peak.peak_flops`;
- :mod:`verl.hardware.flops_counter`: the model's own FLOPs and MFU (verl's ``verl.utils.flops_counter``);
- :mod:`verl.hardware.profiler`: step traces and debug dumps (verl's ``verl.utils.profiler``).

verl's ``verl.utils.hardware``, ``verl.utils.flops_counter`` and ``verl.utils.profiler`` are these same modules.
"""
