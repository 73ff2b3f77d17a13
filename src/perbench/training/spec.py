"""The RL recipe and the ``rl:`` phase of a run config, defined at the base (:mod:`perbench.specs.rl`) so that the
config can check them without this room; imported here too, where they were first defined."""

from __future__ import annotations

from perbench.specs.rl import ALGORITHMS as ALGORITHMS
from perbench.specs.rl import GROUPS as GROUPS
from perbench.specs.rl import PLACEBOS as PLACEBOS
from perbench.specs.rl import PPO_UNAVAILABLE as PPO_UNAVAILABLE
from perbench.specs.rl import SCALE_REWARDS as SCALE_REWARDS
from perbench.specs.rl import RLPhase as RLPhase
from perbench.specs.rl import RLSpec as RLSpec
