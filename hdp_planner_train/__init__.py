"""Optional PyTorch trainer for hdp-planner plans (GDPFed Algorithms 1-2): ``hdp-plan train PLAN.json``.

From Python: ``train(plan, method=…, dataset=…)`` returns a typed :class:`~.api.TrainResult`. Importing this
package does not import torch; the trainer modules (:mod:`.aggregate`, :mod:`.engines`,
:mod:`.models`, :mod:`.trainer`) do. Install with ``pip install torch==2.13.0 && pip install -e '.[train]'``.
"""

from hdp_planner_train.api import TrainResult, train

TORCH_HINT = "pip install torch==2.13.0 && pip install -e '.[train]'"

__all__ = ["TORCH_HINT", "TrainResult", "train"]
