"""NeMo logs: ``train_step_timing in s`` with ``global_step``, in NeMo 1's progress bar (PyTorch Lightning's; a
terminal keeps its last redraw, a redirected log every one)::

    Epoch 0: : 100%|##########| 100/100 [10:48<00:00, reduced_train_loss=0.0172, global_step=99.00,
    consumed_samples=25600.0, train_step_timing in s=3.130]

and the console lines of NeMo 2 and Megatron-Bridge::

    Training epoch 0, iteration 1/249 | lr: 3.922e-06 | global_batch_size: 8 | global_step: 1 |
    reduced_train_loss: 1.653 | train_step_timing in s: 2.505 | consumed_samples: 16

(one line each). Read as the :data:`NEMO` stack: each line is a record of its one step, ``consumed_samples``
counting the job's samples up to and including it. What each figure means: docs/importers.md ("What each log
says").
"""

from __future__ import annotations

from trainperf.importers.generic import Stack

NEMO = Stack(
    "nemo", "a NeMo log",
    keys={"global_step": "step", "train_step_timing in s": "step_time_s", "consumed_samples": "samples_total",
          "reduced_train_loss": "loss", "global_batch_size": "global_batch_size"},
    start=r"train_step_timing in s\s*[=:]", time="train_step_timing in s", anchors=("train_step_timing in s",),
    sniff=r"train_step_timing in s\s*[=:]\s*[-+.\d]")
parse_step = NEMO.parse
