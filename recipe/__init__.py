"""Recipes written the way verl's ``recipe/`` directory writes them: each sub-package brings its own algorithm
pieces (advantage estimator, policy loss, reward manager, dataset, trainer subclass) and a ``main_*.py`` that runs
them through verl's trainer."""
