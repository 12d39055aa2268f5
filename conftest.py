"""Settings shared by every test suite.

This file sits at the repository root, beside `tests/` rather than in it: a
`tests/conftest.py` would put `tests/` on `sys.path`, where `tests/adapters` would shadow
the `adapters` package.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

# The suite runs on loaded CI machines from a cold clone: generating the first examples
# and the first calls into freshly imported modules can take longer than hypothesis's
# default budgets. Speed is measured in bench/, never asserted here.
settings.register_profile(
    "signoff",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("signoff")
