"""``spmdc.capture``: an ``nn.Module`` (forward, or a whole training step) -> verified spmdc IR.

    module = spmdc.capture(model, (x,))                                  # forward
    module = spmdc.capture(model, (x, y), train=True, loss_fn=F.mse_loss)  # loss + gradients

Stages (timed in :attr:`Captured.timings`): ``export`` (torch.export + decompositions, the joint
forward/backward graph for training), ``check`` (every op has a translation), ``import``
(torch-mlir FX importer), ``translate`` (torch dialect -> ``tensor`` dialect) and ``verify``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from spmdc.ir.core import Operation

if TYPE_CHECKING:  # importing the data model imports torch; keep `import spmdc` light
    from spmdc.frontend.program import ExportedProgramInfo


@dataclass
class Captured:
    """The spmdc module plus what is needed to call it like the model.

    To run it, pass :meth:`arguments` to an executor, e.g. the reference interpreter
    ``spmdc.runtime.interpreter.interpret(cap.module, cap.arguments(*user_inputs))``
    (the frontend itself does not import the runtime).
    """

    module: Operation
    info: ExportedProgramInfo
    num_model_inputs: int
    timings: dict[str, float] = field(default_factory=dict)
    stats: Any = None  # TranslationStats
    blocks: Any = None  # spmdc.frontend.repeated.BlockReuse: whether repeated blocks were built from a template

    def arguments(self, *user_inputs: Any, state: Mapping[str, Any] | None = None) -> list[Any]:
        """Arguments of ``@main`` in order: parameters/buffers (from the model's state at capture
        time, or ``state`` by FQN) and then ``user_inputs`` (model inputs, then loss inputs)."""
        st = dict(self.info.state)
        if state:
            st.update({self.info.tied_parameters.get(k, k): v for k, v in state.items()})
        args = []
        for inp in self.info.inputs:
            if inp.kind == "constant":
                continue
            args.append(user_inputs[inp.user_index] if inp.kind == "user_input" else st[inp.fqn])
        return args


def split_inputs(example_inputs: Any, loss_fn: Callable | None) -> tuple[tuple, tuple]:
    """``example_inputs`` may be ``(model_args, loss_args)`` when a loss_fn takes targets."""
    if not isinstance(example_inputs, (tuple, list)):
        return (example_inputs,), ()
    if (loss_fn is not None and len(example_inputs) == 2
            and all(isinstance(p, (tuple, list)) for p in example_inputs)):
        return tuple(example_inputs[0]), tuple(example_inputs[1])
    return tuple(example_inputs), ()


def _user_input_names(model: Any, n_model: int, n_loss: int, kwargs: Mapping[str, Any] | None) -> dict[int, str]:
    """Argument names for user inputs: forward's parameter names, ``target``s, keyword names."""
    import inspect

    try:
        params = [p.name for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = {i: params[i] if i < len(params) else f"input{i}" for i in range(n_model)}
    for j in range(n_loss):
        names[n_model + j] = "target" if n_loss == 1 else f"target{j}"
    for k, key in enumerate(kwargs or {}):
        names[n_model + n_loss + k] = key
    used: set[str] = set()
    for i, n in names.items():  # keep them distinct
        while n in used:
            n += "_"
        names[i] = n
        used.add(n)
    return names


_REUSED: dict[tuple, tuple[Captured, tuple]] | None = None


@contextlib.contextmanager
def reusing_captures() -> Iterator[None]:
    """Within it, a capture of the same model, inputs and settings is made once and later ones
    get a copy with a clone of its module (the layout search compiles one model under many
    plans: spmdc.api.auto_plan). Its parameters must not change meanwhile; its module tree may (a
    model cut to fewer blocks, :func:`~spmdc.frontend.repeated.keep_blocks`, is another model: the
    key holds every submodule's identity)."""
    from spmdc.frontend.repeated import reusing_templates

    global _REUSED
    outer = _REUSED
    _REUSED = {} if outer is None else outer
    try:
        with reusing_templates():   # (a model cut to each depth: built from one template)
            yield
    finally:
        _REUSED = outer


def capture_program(model: Any, example_inputs: Sequence[Any], *, train: bool = False,
                    loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                    example_kwargs: Mapping[str, Any] | None = None, checkpoint: str | None = None,
                    mixed_precision: Any = None, return_outputs: bool = False,
                    reuse_blocks: bool | None = None) -> Captured:
    """Like :func:`capture` but returns a :class:`Captured` with timings and input bookkeeping.
    ``checkpoint="blocks"``: checkpoint every repeated block (training captures); ``return_outputs``:
    a training capture also returns the model's tensor outputs after the loss; ``reuse_blocks``:
    build the program of a model's repeated blocks from an export of its first few
    (:mod:`spmdc.frontend.repeated`; None: when it has at least ``MIN_BLOCKS`` of them, checked
    against a real export either way); inside :func:`reusing_captures`, once per model and settings."""
    if _REUSED is None:
        return _capture_program(model, example_inputs, train=train, loss_fn=loss_fn, loss_inputs=loss_inputs,
                                example_kwargs=example_kwargs, checkpoint=checkpoint,
                                mixed_precision=mixed_precision, return_outputs=return_outputs,
                                reuse_blocks=reuse_blocks)
    held = (model, tuple(example_inputs), loss_fn, tuple(loss_inputs), dict(example_kwargs or {}))
    traced = (id(model), tuple(map(id, held[1])), train, id(loss_fn), tuple(map(id, held[3])),
              tuple((k, id(v)) for k, v in held[4].items()), checkpoint, repr(mixed_precision), return_outputs,
              reuse_blocks)   # (what a trace depends on besides the module tree)
    key = (traced, tuple(map(id, model.modules())))
    if key not in _REUSED:
        out = _capture_program(model, example_inputs, train=train, loss_fn=loss_fn, loss_inputs=loss_inputs,
                               example_kwargs=example_kwargs, checkpoint=checkpoint, mixed_precision=mixed_precision,
                               return_outputs=return_outputs, reuse_blocks=reuse_blocks, template_key=traced)
        _REUSED[key] = (dataclasses.replace(out, module=out.module.clone()), held)   # (held: ids stay valid)
        return out
    first = _REUSED[key][0]
    return dataclasses.replace(first, module=first.module.clone(), timings={**first.timings, "reused": 1.0})


def _capture_program(model: Any, example_inputs: Sequence[Any], *, train: bool = False,
                    loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                    example_kwargs: Mapping[str, Any] | None = None, checkpoint: str | None = None,
                    mixed_precision: Any = None, return_outputs: bool = False,
                    reuse_blocks: bool | None = None, template_key: Any = None) -> Captured:
    """The capture itself (:func:`capture_program`; ``template_key``: its settings, within
    :func:`reusing_captures`, for :func:`~spmdc.frontend.repeated.export_reusing_blocks`)."""
    from spmdc.frontend.aten import UnsupportedOpError
    from spmdc.frontend.deferred_init import cpu_examples, fake_parameters, is_meta_model
    from spmdc.frontend.export import finish_program, mixed_dtypes_hint, trace_program
    from spmdc.frontend.mixed_precision import MixedPrecision
    from spmdc.frontend.program import ExportError
    from spmdc.frontend.repeated import export_reusing_blocks
    from spmdc.frontend.torch_mlir_bridge import import_to_torch_mlir
    from spmdc.frontend.translate import TranslationStats, check_supported, translate
    from spmdc.ir.verifier import verify

    model_args, extra = split_inputs(example_inputs, loss_fn)
    loss_inputs = tuple(loss_inputs) + extra
    if not train:  # a forward capture ignores the loss
        loss_fn, loss_inputs = None, ()
    timings: dict[str, float] = {}
    t = time.perf_counter()
    # a model on the meta device (spmdc.deferred_init, or built under torch.device("meta")) is
    # exported with fake CPU parameters in place of its meta ones (shapes, dtypes, ties; no memory)
    meta = hasattr(model, "parameters") and hasattr(model, "buffers") and is_meta_model(model)
    if meta:   # (and its example inputs on meta, if the user built them there, real CPU ones of their shapes)
        model_args, loss_inputs, example_kwargs = cpu_examples((model_args, loss_inputs, example_kwargs))
    with fake_parameters(model) if meta else contextlib.nullcontext():
        info, blocks = export_reusing_blocks(model, lambda: trace_program(
            model, model_args, train=train, loss_fn=loss_fn, loss_inputs=loss_inputs, example_kwargs=example_kwargs,
            checkpoint=checkpoint, mixed_precision=mixed_precision, return_model_outputs=return_outputs),
            finish_program, reuse_blocks, key=template_key)
    timings["export"] = time.perf_counter() - t
    t = time.perf_counter()
    check_supported(info)
    timings["check"] = time.perf_counter() - t
    t = time.perf_counter()
    torch_module, _ctx, _mapping = import_to_torch_mlir(info)
    timings["import"] = time.perf_counter() - t
    stats = TranslationStats()
    names = _user_input_names(model, len(model_args), len(loss_inputs), example_kwargs)
    try:
        module = translate(torch_module, info, stats=stats, user_names=names)
    except UnsupportedOpError as err:   # fake tensors let bf16 @ f32 through the export; its translation refuses it
        policy = MixedPrecision.parse(mixed_precision)
        if "different element types" not in str(err):
            raise
        hint = mixed_dtypes_hint(policy.name) if policy is not None else (
            " (the model mixes dtypes in one op, which eager PyTorch refuses too: cast the model and its "
            "inputs to one dtype, e.g. a float64 model fed float32 inputs)")
        raise ExportError(f"{err}{hint}") from err
    timings["translate"] = stats.seconds
    t = time.perf_counter()
    verify(module)
    timings["verify"] = time.perf_counter() - t
    timings["total"] = sum(timings.values())
    return Captured(module, info, len(model_args), timings, stats, blocks)


def capture(model: Any, example_inputs: Sequence[Any], *, train: bool = False,
            loss_fn: Callable | None = None, **kwargs: Any) -> Operation:
    """Capture ``model`` into a verified spmdc ``builtin.module`` with ``func.func @main``.

    ``example_inputs``: the model's positional inputs; with ``train=True`` and a ``loss_fn``
    taking extra tensors, pass ``((model inputs...), (loss inputs...))`` or ``loss_inputs=``.
    ``loss_fn(model_output, *loss_inputs)`` gives the scalar loss; without it a training
    capture needs a model that returns its loss. Raises
    :class:`~spmdc.frontend.aten.UnsupportedOpError` for an op spmdc cannot translate.
    """
    return capture_program(model, example_inputs, train=train, loss_fn=loss_fn, **kwargs).module
