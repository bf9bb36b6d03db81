"""How many examples each property test runs: CI's budget, or a deep one for `make fuzz`.

A property test finds a latent decoder bug only when one of its random examples hits it, so
CI's small budget lets a rare bug through for hundreds of runs and then fails one at random.
`make fuzz` runs the same tests with many times the examples to find such bugs first. The
budget is a hypothesis profile chosen by the `HYPOTHESIS_PROFILE` environment variable
("gateway", CI's default, or "deep"). A test that asks for its own number of examples in
`@settings(max_examples=...)` would override any profile, so it asks through `examples(n)`,
which scales its number by the loaded profile: n under CI's profile, n times
`DEEP_SCALE` (or `FUZZ_SCALE`) under the deep one.
"""

from __future__ import annotations

import os

from hypothesis import settings

# hypothesis' own default number of examples: what a test without a number of its own runs
# under CI's profile, and the unit `examples` scales by
BASE_EXAMPLES = 100
# how many times CI's examples `make fuzz` runs (minutes per decoder module, not seconds);
# FUZZ_SCALE=n in the environment for another multiple (a quicker pass on a busy machine)
DEEP_SCALE = 50


def load_profile() -> None:
    """Register both profiles and load the one `HYPOTHESIS_PROFILE` names ("gateway" if unset).

    Both drop hypothesis' 200 ms deadline per example: property tests check behaviour, not
    speed, and on a loaded machine (the stress mode, CI beside other jobs) the deadline failed
    tests that were right.
    """
    settings.register_profile("gateway", deadline=None, max_examples=BASE_EXAMPLES)
    scale = int(os.environ.get("FUZZ_SCALE", DEEP_SCALE))
    settings.register_profile(
        "deep", parent=settings.get_profile("gateway"), max_examples=BASE_EXAMPLES * scale
    )
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gateway"))


def examples(wanted: int) -> int:
    """`wanted` examples scaled by the loaded profile: exactly `wanted` under CI's profile."""
    return wanted * settings().max_examples // BASE_EXAMPLES
