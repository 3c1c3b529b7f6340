"""Optional PyTorch trainer for hdp-planner plans (GDPFed Algorithms 1-2): ``hdp-plan train PLAN.json``.

Importing this package does not import torch; the trainer modules (:mod:`.aggregate`, :mod:`.engines`,
:mod:`.models`, :mod:`.trainer`) do. Install with ``pip install torch==2.13.0 && pip install -e '.[train]'``.
"""

TORCH_HINT = "pip install torch==2.13.0 && pip install -e '.[train]'"

__all__ = ["TORCH_HINT"]
