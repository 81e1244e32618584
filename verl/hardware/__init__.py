"""Facts of the hardware a run is on: what a device computes fast, and how fast.

- :mod:`verl.utils.hardware.precision`: which compute dtype ``dtype: auto`` means on a device (bf16 only where it
  multiplies bf16 natively), :func:`~verl.utils.hardware.precision.resolve_dtype`;
- :mod:`verl.utils.hardware.peak`: the device's peak FLOP/s for MFU (the GPU datasheet table, else measured at the
  model's matmul shapes), :func:`~verl.utils.hardware.peak.peak_flops`.

The model's own FLOPs and MFU stay at verl's path, :mod:`verl.utils.flops_counter`.
"""
