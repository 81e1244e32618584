"""verl's module path for the core algorithms; the code lives one floor down, in :mod:`verl.algorithms.core_algos`.

Importing this module gives that same module object (not a copy), so ported code that reads, patches or extends
``verl.trainer.ppo.core_algos`` (its registries, its functions) acts on exactly what the workers and the driver use.
"""

import sys

from verl.algorithms import core_algos as _core_algos

sys.modules[__name__] = _core_algos
