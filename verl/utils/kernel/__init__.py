"""Kernels that avoid materialising large intermediates (upstream verl's ``verl.utils.kernel`` path)."""
