"""The former home of the request servers, kept for ported code: importing it gives
:mod:`verl.workers.rollout.request_server` itself (the same module object), so there is one implementation."""

import sys

from verl.workers.rollout import request_server

sys.modules[__name__] = request_server
