"""NeMo logs: ``train_step_timing in s`` with ``global_step`` (NeMo 1 progress
bar, NeMo 2 / Megatron-Bridge console lines).

NeMo 1 (PyTorch Lightning's progress bar; a terminal keeps its last redraw,
a redirected log every one)::

    Epoch 0: : 100%|##########| 100/100 [10:48<00:00, reduced_train_loss=0.0172, global_step=99.00,
    consumed_samples=25600.0, train_step_timing in s=3.130]

NeMo 2::

    Training epoch 0, iteration 1/249 | lr: 3.922e-06 | global_batch_size: 8 | global_step: 1 |
    reduced_train_loss: 1.653 | train_step_timing in s: 2.505 | consumed_samples: 16

(one line each).

What the vocabulary gets from it (``trainperf.importers.generic.Stack``):

* ``train_step_timing in s`` is the wall time of the step ``global_step``
  (counted from 0): each line is a record of one step. Step 0 is warm-up; a
  log that starts later (a progress bar's last redraw) is measured whole. A
  line needs only its timing: one without ``global_step`` is the next step
  of its rank (the first such line step 0).
* ``consumed_samples`` counts the whole job's samples up to and including
  the step: a record's ``samples`` is its change from the previous line (over
  the steps between), else ``global_batch_size`` where printed.
* ``reduced_train_loss`` gives ``train_loss``; ``global_batch_size`` gives the
  run's ``global_batch_size``.
"""

from __future__ import annotations

from trainperf.importers.generic import Stack, StackFormat

NEMO = Stack(
    "nemo", "a NeMo log",
    keys={"global_step": "step", "train_step_timing in s": "step_time_s", "consumed_samples": "samples_total",
          "reduced_train_loss": "loss", "global_batch_size": "global_batch_size"},
    start=r"train_step_timing in s\s*[=:]", time="train_step_timing in s", anchors=("train_step_timing in s",),
    sniff=r"train_step_timing in s\s*[=:]\s*[-+.\d]")
parse_step = NEMO.parse


class NeMo(StackFormat):
    def __init__(self) -> None:
        super().__init__(NEMO)
