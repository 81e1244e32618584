"""Helpers of upstream verl's engine workers (``verl.workers.utils``): the padded <-> packed (nested) layouts."""
