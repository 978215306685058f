"""Hypothesis settings profiles, one per use; ``HYPOTHESIS_PROFILE`` picks one by name.

* ``dev`` (the default locally): few examples per property, random each run, with the
  example database, so repeated local runs keep exploring and replay past failures.
* ``ci`` (the default when ``CI`` is set, as ``.ci/run`` does): Hypothesis's own ``ci``
  profile (derandomized, no database, failure blobs printed, no too-slow health check)
  with 45 examples per property (60 until the suite outgrew its 5-minute budget on 2
  cores: 4:40-5:24 cold in CI with 60).
* ``quick``: a smoke run of every property (a handful of examples each).

Tests that need more (or fewer) examples than the profile scale ``max_examples`` from
``settings.default.max_examples`` (the profile loaded here), so each profile keeps their ratio.
No profile has a deadline: the compiled kernels' first call compiles.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("quick", max_examples=5, deadline=None)
settings.register_profile("dev", max_examples=20, deadline=None)
settings.register_profile(
    "ci", settings.get_profile("ci"), max_examples=45, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
