"""A/A calibration: run one arm as two identical arms and measure the noise floor.

The spread of the per-round log-ratio between two identical arms (sigma) is what
every real comparison with this setup has to beat: it gives the width of the
interval after n rounds and the rounds a given effect needs,
n ~ ((t_{1-alpha/2} + t_{0.8}) sigma / delta)^2 (80% power; 2.8 sigma/delta with z).
"""

from __future__ import annotations

from abbench.campaign.progress import Progress
from abbench.campaign.runner import Campaign, RunOptions, RunOutcome
from abbench.config.schema import Config


def aa_config(cfg: Config, arm_name: str) -> Config:
    """``cfg`` with two arms: ``arm_name`` (the baseline) and its identical twin."""
    arm = cfg.arm(arm_name)
    twin = arm.model_copy(update={"name": f"{arm.name[:58]}-twin",
                                  "label": f"{arm.label or arm.name} (twin)"})
    return cfg.model_copy(update={"arms": [arm, twin], "baseline": arm.name})


def calibrate(cfg: Config, arm: str, opts: RunOptions, *, progress: Progress | None = None
              ) -> RunOutcome:
    """Run the A/A campaign (a normal stored run with the twin as second arm)."""
    return Campaign(aa_config(cfg, arm), opts, progress=progress).execute()
