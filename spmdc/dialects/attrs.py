"""The ``spmdc.*`` discardable attributes: every name spelled once, here.

They say what the captured program's pieces mean to the compiler and the runtime; no op owns
them (they sit on ``func.func`` arguments, results and functions, and on a few ops), so they
live beside the dialects rather than inside one. Use the constants, never the string::

    from spmdc.dialects.attrs import PARAM_ATTR, RANK_ATTR
    fqn = func.arg_attrs(i).get(PARAM_ATTR)          # {spmdc.param = "fc1.weight"}
    func.set_attr(RANK_ATTR, IntegerAttr(1))          # func.func @main(...) attributes {spmdc.rank = 1}

In the IR::

    func.func @main(%w: tensor<16x16xf32> {spmdc.param = "fc.weight"}, %x: tensor<8x16xf32>)
        -> (tensor<f32> {spmdc.loss}, tensor<16x16xf32> {spmdc.grad_of = "fc.weight"})
        attributes {spmdc.train_step}

``tests/unit/dialects/test_attr_names.py`` fails on a quoted ``"spmdc.<name>"`` of this list
anywhere else in ``spmdc/``. The activation checkpointing modes whose recomputed ops carry
``spmdc.recompute`` are read here too (:func:`checkpoint_every`: ``blocks``, ``blocks/K``), for the
plan files, the options and the frontend alike.
"""

from __future__ import annotations

import re
from typing import Any

# -- function arguments (set by the frontend, spmdc.frontend.translate) --------------------------
PARAM_ATTR = "spmdc.param"                # the argument is parameter (or buffer) <fqn>: StringAttr
BUFFER_ATTR = "spmdc.buffer"              # the parameter argument is a buffer: UnitAttr
TIED_ATTR = "spmdc.tied"                  # the other names of a tied parameter: ArrayAttr of StringAttr
BUCKET_ATTR = "spmdc.bucket"              # the plan's bucket (a glob) the parameter joins: StringAttr

# -- function results ------------------------------------------------------------------------------
LOSS_ATTR = "spmdc.loss"                  # the result is the loss: UnitAttr
GRAD_OF_ATTR = "spmdc.grad_of"            # the result is the gradient of parameter <fqn>: StringAttr
GRAD_OF_INPUT_ATTR = "spmdc.grad_of_input"  # the gradient of user input <k> (a pipeline stage's): IntegerAttr
GRAD_NORM_ATTR = "spmdc.grad_norm"        # the gradients' global norm (clip_grad_norm): UnitAttr
BUFFER_UPDATE_ATTR = "spmdc.buffer_update"  # the new value of buffer <fqn> (BatchNorm statistics): StringAttr

# -- functions -------------------------------------------------------------------------------------
TRAIN_STEP_ATTR = "spmdc.train_step"      # the function is a training step (forward + backward): UnitAttr
RANK_ATTR = "spmdc.rank"                  # the function is one rank's program (after partition): IntegerAttr
UNEVEN_ATTR = "spmdc.uneven"              # a rank program whose local shapes differ between ranks: UnitAttr
STAGE_ATTR = "spmdc.stage"                # a pipeline rank function's stage: IntegerAttr
STAGES_ATTR = "spmdc.stages"              # an interleaved rank function's stages: ArrayAttr of IntegerAttr
SCHEDULE_ATTR = "spmdc.schedule"          # a pipeline rank function's schedule (gpipe, 1f1b): StringAttr
GROUP_ATTR = "spmdc.group"                # the function is device group <mesh>'s program: StringAttr
GROUP_INDEX_ATTR = "spmdc.group_index"    # the group's coordinate on the virtual mesh's grp axis: IntegerAttr
BUCKETS_ATTR = "spmdc.buckets"            # the plan's bucketing mode ("auto"): StringAttr

# -- ops -------------------------------------------------------------------------------------------
RECOMPUTE_ATTR = "spmdc.recompute"        # the op is recomputed in the backward (activation checkpointing)
LATE_ATTR = "spmdc.late"                  # on a shard.annotate: constrains its operand only in the last phase

# -- torch-mlir's import (spmdc.frontend.torch_mlir_bridge): what each argument / result is --------
KIND_ATTR = "spmdc.kind"                  # the signature kind: "parameter", "buffer", "user_input", ...: string
NAME_ATTR = "spmdc.name"                  # the graph input's name
FQN_ATTR = "spmdc.fqn"                    # the parameter's fully qualified name
USER_INDEX_ATTR = "spmdc.user_index"      # the user input's position

# the location of the captured module (a NameLoc, not an attribute)
CAPTURE_LOC = "spmdc.capture"

ATTR_NAMES = (PARAM_ATTR, BUFFER_ATTR, TIED_ATTR, BUCKET_ATTR, LOSS_ATTR, GRAD_OF_ATTR, GRAD_OF_INPUT_ATTR,
              GRAD_NORM_ATTR, BUFFER_UPDATE_ATTR, TRAIN_STEP_ATTR, RANK_ATTR, UNEVEN_ATTR, STAGE_ATTR, STAGES_ATTR,
              SCHEDULE_ATTR, GROUP_ATTR, GROUP_INDEX_ATTR, BUCKETS_ATTR, RECOMPUTE_ATTR, LATE_ATTR, KIND_ATTR,
              NAME_ATTR, FQN_ATTR, USER_INDEX_ATTR, CAPTURE_LOC)


# -- activation checkpointing modes (whose regions' recomputed ops carry RECOMPUTE_ATTR) ----------------
CHECKPOINT_FORMS = "'blocks' (recompute every repeated block) or 'blocks/K' (every K-th: blocks 0, K, 2K, ...)"


def checkpoint_every(mode: Any) -> int:
    """How often activation checkpointing ``mode`` (a plan's or ``CompileOptions``' ``checkpoint``)
    recomputes the model's repeated blocks in the backward: 0 for None (none), 1 for ``"blocks"``
    (every one), K for ``"blocks/K"`` (blocks 0, K, 2K, ... of the model's list of repeated blocks,
    as torchtitan's selective checkpointing of every K-th layer). Anything else: ValueError.

        checkpoint_every("blocks/2") == 2     # layers.0, layers.2, ... recompute; layers.1, ... keep
    """
    if mode is None:
        return 0
    if mode == "blocks":
        return 1
    m = re.fullmatch(r"blocks/([0-9]+)", mode) if isinstance(mode, str) else None
    if m and int(m.group(1)) >= 1:
        return int(m.group(1))
    raise ValueError(f"expected {CHECKPOINT_FORMS}, got {mode!r}")
