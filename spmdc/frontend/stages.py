"""Cut a training step (model + loss) into pipeline stages by module.

    split = split_stages(model, inputs, loss_fn=lm_loss, loss_inputs=(y,),
                         stages=[["wte", "wpe", "h.0"], ["h.1", "ln_f", "lm_head"]])
    split.stages[0].module(*args)     # an nn.Module (fx GraphModule): stage 0's forward

The model and its loss are exported once with ``torch.export`` (training IR, before
decomposition); every op is assigned to the stage whose modules contain it (by the op's
``nn_module_stack``); an op outside every listed module runs in the latest stage among its
operands' (GPT-2's ``tok + pos`` with the embeddings), or, when it reads only model inputs and
parameters, with its first reader (the targets' reshape goes to the loss in the last stage);
and the graph is cut into one fx graph per stage. Each stage is an ``nn.Module`` whose parameters keep the
model's names (``h.1.attn.c_proj.weight``), whose inputs are the user inputs it reads and the
*boundary values* earlier stages computed, and whose outputs are the boundary values later
stages read (the last stage returns the loss). A parameter several stages read (GPT-2's tied
``wte.weight``/``lm_head.weight``) is in each of them: :attr:`StageSplit.shared`.

Stage patterns: a module path (``h.0``, ``transformer.wte``), a range of numbered siblings
(``h.0-h.3`` or ``h.0-3``) or a glob (``h.*``); a pattern that names no module is an error
that lists near matches, and so is a stage that needs a value a later stage computes.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from spmdc.frontend import torch_compat
from spmdc.frontend.program import ExportError

__all__ = ["ORDER_META", "BoundaryValue", "Stage", "StageError", "StageModule", "StageSplit", "auto_stages",
           "buffer_updates", "expand_pattern", "random_nodes", "random_ops", "split_stages"]


class StageError(ValueError):
    """A stage split that cannot be made (an unknown module, a backward dependency)."""


@dataclass(frozen=True)
class BoundaryValue:
    """A value one stage computes and a later one reads."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    producer: int
    consumers: tuple[int, ...]
    needs_grad: bool = True   # computed from a parameter that requires grad

    @property
    def differentiable(self) -> bool:
        """Whether its gradient flows back to its producer."""
        return self.dtype.is_floating_point and self.needs_grad


@dataclass
class Stage:
    """One stage: ``module(*inputs) -> tuple(outputs)``; ``inputs`` are ``("input", i)`` (the
    i-th user input) or ``("value", v)`` (boundary value v); ``outputs`` boundary value ids
    (the last stage: the loss)."""

    index: int
    module: nn.Module
    inputs: list[tuple[str, int]]
    outputs: list[int]
    modules: list[str]
    params: list[str]


@dataclass
class StageSplit:
    stages: list[Stage]
    values: dict[int, BoundaryValue]
    shared: dict[str, list[int]] = field(default_factory=dict)   # parameter -> stages that read it
    aliases: dict[int, list[str]] = field(default_factory=dict)  # id(parameter) -> all its model names

    def table(self) -> list[tuple[int, str, str, str]]:
        """(stage, modules, inputs, outputs) rows for printing."""
        rows = []
        for s in self.stages:
            ins = ", ".join(f"in{i}" if k == "input" else self.values[i].name for k, i in s.inputs)
            outs = "loss" if s.index == len(self.stages) - 1 else ", ".join(self.values[v].name for v in s.outputs)
            rows.append((s.index, " ".join(s.modules), ins, outs))
        return rows


def expand_pattern(pattern: str, modules: Sequence[str]) -> list[str]:
    """The module paths ``pattern`` names among ``modules`` (see the module doc)."""
    m = re.fullmatch(r"(.*?)(\d+)-(?:(.*?)\.)?(\d+)", pattern)
    if m and (m.group(3) is None or m.group(3) + "." == m.group(1) or m.group(3) == m.group(1).rstrip(".")):
        prefix, lo, hi = m.group(1), int(m.group(2)), int(m.group(4))
        if lo > hi:
            raise StageError(f"stage pattern '{pattern}': range {lo}-{hi} is empty")
        names = [f"{prefix}{i}" for i in range(lo, hi + 1)]
        missing = [n for n in names if n not in modules]
        if missing:
            raise StageError(f"stage pattern '{pattern}': the model has no module '{missing[0]}'")
        return names
    if any(c in pattern for c in "*?["):
        return [n for n in modules if fnmatch.fnmatchcase(n, pattern)]
    return [pattern] if pattern in modules else []


def auto_stages(model: nn.Module, n: int) -> list[list[str]]:
    """``n`` stages over the model's longest list of repeated blocks (``h.0`` ... ``h.N``), as even
    as they divide; ops before the blocks join stage 0 and ops after them the last stage."""
    best: tuple[str, int] | None = None
    for name, mod in model.named_modules():
        if isinstance(mod, (nn.ModuleList, nn.Sequential)) and len(mod) >= (best[1] if best else 0):
            if best is None or len(mod) > best[1]:
                best = (name, len(mod))
    if best is None or best[1] < n:
        raise StageError(f"cannot cut the model into {n} stages automatically: it has "
                         + (f"only {best[1]} repeated blocks ('{best[0]}')" if best else "no list of repeated blocks")
                         + "; name each stage's modules in the plan's 'stages'")
    name, count = best
    prefix = f"{name}." if name else ""
    base, extra = divmod(count, n)
    out, at = [], 0
    for k in range(n):
        size = base + (1 if k < extra else 0)
        out.append([f"{prefix}{i}" for i in range(at, at + size)])
        at += size
    return out


_RANDOM = ("dropout", "native_dropout", "bernoulli", "rand", "randn", "randint", "rand_like", "randn_like",
           "randint_like", "normal", "uniform", "randperm", "multinomial", "feature_dropout", "alpha_dropout")


# attention ops that draw a dropout mask when their dropout_p (at this argument position) is not 0
_ATTENTION_DROPOUT = {"scaled_dot_product_attention": 4, "scaled_dot_product_flash_attention_for_cpu": 3,
                      "scaled_dot_product_flash_attention": 3, "scaled_dot_product_efficient_attention": 5,
                      "scaled_dot_product_cudnn_attention": 5}
ORDER_META = "spmdc_order"   # node.meta key: the op's place in the whole model's order (kept in every stage)


def random_nodes(module: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, str]]:
    """``(node, "op in module 'path'")`` of every op in ``module`` that draws random numbers, in
    the graph's order (a dropout with ``p = 0`` or not training draws nothing)."""
    out = []
    for node in module.graph.nodes:
        namer = getattr(node.target, "name", None)   # an aten OpOverload: "aten::dropout"
        if node.op != "call_function" or not callable(namer):
            continue
        full = str(namer()).split("::")[-1]
        name = full.split(".")[0].lstrip("_")
        if name in _ATTENTION_DROPOUT:   # attention with dropout_p > 0 in training draws its mask
            pos = _ATTENTION_DROPOUT[name]
            p = node.args[pos] if len(node.args) > pos else node.kwargs.get("dropout_p", 0.0)
            if p:
                out.append((node, f"aten.{full} (dropout_p={p}) in module '{_module_path(node) or '<root>'}'"))
            continue
        if name not in _RANDOM:
            continue
        if "dropout" in name:
            p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p", 0.5)
            train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", True)
            if not train or p == 0:
                continue
        out.append((node, f"aten.{full} in module '{_module_path(node) or '<root>'}'"))
    return out


def random_ops(module: torch.fx.GraphModule) -> list[str]:
    """``op (module path)`` of every op in ``module`` that draws random numbers (see :func:`random_nodes`)."""
    return [what for _, what in random_nodes(module)]


def buffer_updates(module: torch.fx.GraphModule) -> list[str]:
    """``op (module path)`` of every op in ``module`` that updates a buffer in place (a BatchNorm's
    running statistics in training, ``num_batches_tracked``)."""
    out = []
    for node in module.graph.nodes:
        namer = getattr(node.target, "name", None)
        if node.op != "call_function" or not callable(namer):
            continue
        full = str(namer()).split("::")[-1]
        name = full.split(".")[0]
        inplace = name.endswith("_") and node.args and getattr(node.args[0], "op", None) == "get_attr"
        bn_training = name in ("batch_norm", "native_batch_norm", "_native_batch_norm_legit") and \
            len(node.args) > 5 and node.args[5] is True
        if inplace or bn_training:
            out.append(f"aten.{full} in module '{_module_path(node) or '<root>'}'")
    return out


def _module_path(node: torch.fx.Node) -> str | None:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    path = list(stack.values())[-1][0]
    path = re.sub(r"^L__self__[._]?", "", path)
    if path == "model" or path == "":
        return ""
    return path[len("model."):] if path.startswith("model.") else path


def _owner(path: str, owners: Mapping[str, int]) -> int | None:
    """The stage of the innermost listed module containing ``path``."""
    parts = path.split(".") if path else []
    for k in range(len(parts), 0, -1):
        s = owners.get(".".join(parts[:k]))
        if s is not None:
            return s
    return None


def _exported_graph(model: nn.Module, inputs: tuple, loss_fn: Callable | None, loss_inputs: tuple,
                    kwargs: Mapping[str, Any], policy: Any = None, checkpoint: str | None = None
                    ) -> torch.fx.GraphModule:
    """The model + loss as one fx graph over aten ops, parameters read by their model names;
    under a mixed-precision ``policy`` with its casts (parameters and inputs to ``param_dtype``,
    every dtype-dependent op traced in that dtype), with ``checkpoint="blocks"`` each repeated
    block's ops (``"blocks/K"``: every K-th) marked as a checkpoint region (:mod:`spmdc.frontend.checkpoint`)."""
    import contextlib

    from spmdc.dialects.attrs import checkpoint_every
    from spmdc.frontend.checkpoint import marking_checkpoints
    from spmdc.frontend.deferred_init import cpu_examples, fake_parameters, is_meta_model
    from spmdc.frontend.export import kept_modes
    from spmdc.frontend.loss import LossWrapper

    root = LossWrapper(model, loss_fn, len(inputs), False, policy)
    every = checkpoint_every(checkpoint)
    marking = marking_checkpoints(model, blocks=every) if every else contextlib.nullcontext()
    # (a meta model is traced from fake tensors; the stages then hold its meta tensors, see spmdc.api.pipeline_executor)
    fake = fake_parameters(model) if is_meta_model(model) else contextlib.nullcontext()
    if is_meta_model(model):   # (example inputs a user built on meta: CPU ones of their shapes, cpu_examples)
        inputs, loss_inputs, kwargs = cpu_examples((tuple(inputs), tuple(loss_inputs), dict(kwargs)))
    try:   # every module traced in its own mode (a frozen submodule in eval), each flag kept
        with kept_modes(model), marking, fake:
            ep = torch.export.export(root, inputs + loss_inputs, dict(kwargs), strict=False)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"torch.export.export failed: {type(e).__name__}: {e}") from e
    gm = ep.module()
    graph = gm.graph
    holder = nn.Module()   # what the graph reads, under the model's names: the model's own tensors
    persistent = set(model.state_dict(keep_vars=True))
    for node in list(graph.nodes):
        if node.op == "call_module" and node.target == "_guards_fn":
            graph.erase_node(node)
        elif node.op == "call_function" and "_assert_tensor_metadata" in str(node.target) and not node.users:
            graph.erase_node(node)   # a trace-time check of a .to(): it would pull its operand into the last stage
        elif node.op == "get_attr":
            original = node.target
            node.target = original[len("model."):] if original.startswith("model.") else original
            try:
                value = _resolve(model, node.target)
            except AttributeError:   # a constant torch.export lifted (lifted_tensor_0)
                value = _resolve(gm, original)
            _install(holder, node.target, value, persistent)
    torch_compat.plain_codegen(graph)   # positional inputs, in order (no pytree spec)
    out = torch.fx.GraphModule(holder, graph)
    out.graph.lint()
    return out


def _resolve(root: nn.Module, path: str) -> Any:
    obj: Any = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _install(holder: nn.Module, path: str, value: Any, persistent: set[str]) -> None:
    """``value`` at ``path`` in ``holder``: a parameter as a parameter, a model buffer as a buffer
    (persistent as in the model), any other tensor as a non-persistent buffer."""
    *mods, leaf = path.split(".")
    owner = holder
    for m in mods:
        child = getattr(owner, m, None)
        if not isinstance(child, nn.Module):
            child = nn.Module()
            owner.add_module(m, child)
        owner = child
    if isinstance(value, nn.Parameter):
        owner.register_parameter(leaf, value)
    elif isinstance(value, torch.Tensor):
        owner.register_buffer(leaf, value, persistent=path in persistent)
    else:
        setattr(owner, leaf, value)


def split_stages(model: nn.Module, inputs: Sequence[Any], *, stages: Sequence[Sequence[str]],
                 loss_fn: Callable | None = None, loss_inputs: Sequence[Any] = (),
                 kwargs: Mapping[str, Any] | None = None, mixed_precision: Any = None,
                 checkpoint: str | None = None) -> StageSplit:
    """Cut ``model`` (+ ``loss_fn``) into ``len(stages)`` stages (see the module doc). User inputs
    are numbered ``[*inputs, *loss_inputs, *kwargs.values()]``. ``mixed_precision`` (a policy):
    the model is cut as it runs under it — each stage casts the parameters it reads, its ops and
    boundary values in the dtypes the policy gives (a bf16 hidden state crosses as bf16).
    ``checkpoint="blocks"``: each repeated block is a checkpoint region, which a training capture
    of its stage recomputes in the backward."""
    if len(stages) < 2:
        raise StageError(f"a pipeline needs at least 2 stages, got {len(stages)}")
    names = [n for n, _ in model.named_modules() if n]
    owners: dict[str, int] = {}
    listed: list[list[str]] = []
    for k, pats in enumerate(stages):
        mine: list[str] = []
        for pat in pats:
            found = expand_pattern(str(pat), names)
            if not found:
                near = difflib.get_close_matches(str(pat), names, n=3)
                raise StageError(f"stage {k}: the model has no module '{pat}'"
                                 + (f" (did you mean {', '.join(repr(x) for x in near)}?)" if near else ""))
            for f in found:
                if f in owners and owners[f] != k:
                    raise StageError(f"module '{f}' is listed in stage {owners[f]} and stage {k}")
                owners[f] = k
            mine += found
        if not mine:
            raise StageError(f"stage {k} lists no module")
        listed.append(mine)
    from spmdc.frontend.mixed_precision import MixedPrecision

    gm = _exported_graph(model, tuple(inputs), loss_fn, tuple(loss_inputs), dict(kwargs or {}),
                         MixedPrecision.parse(mixed_precision), checkpoint)
    where: dict[torch.fx.Node, int] = {}
    last = len(stages) - 1
    ops = [x for x in gm.graph.nodes if x.op not in ("placeholder", "get_attr", "output")]
    for i, node in enumerate(ops):   # (node_copy keeps meta: each stage's ops know their place)
        node.meta[ORDER_META] = i
    owner = {x: _owner(_module_path(x) or "", owners) for x in ops}
    late: dict[torch.fx.Node, int] = {}   # an op outside the listed modules runs with its first reader
    for node in reversed(ops):
        late[node] = owner[node] if owner[node] is not None else min(
            (late.get(u, last) for u in node.users), default=last)
    for node in ops:
        before = max((where.get(a, 0) for a in node.all_input_nodes), default=0)
        own = owner[node]
        if own is not None and own < before:
            producer = next(a for a in node.all_input_nodes if where.get(a, 0) == before)
            raise StageError(f"stage {own} (module '{_module_path(node)}', op {node.target}) reads a value that "
                             f"stage {before} computes (module '{_module_path(producer) or '<root>'}'): stages must "
                             "follow the order in which the model runs its modules")
        reads_ops = any(a in where for a in node.all_input_nodes)
        where[node] = own if own is not None else before if reads_ops else max(before, late[node])
    loss = gm.graph.output_node().args[0][0]
    if where.get(loss, 0) != last:
        raise StageError(f"the loss is computed in stage {where.get(loss, 0)}, not the last stage ({last}): the last "
                         "stage's modules must run last")
    used = sorted(set(where.values()))
    if used != list(range(len(stages))):
        empty = sorted(set(range(len(stages))) - set(used))
        raise StageError(f"stage {empty[0]} ({' '.join(listed[empty[0]])}) has no op: its modules do nothing in "
                         "this forward")
    split = _cut(gm, gm, where, listed)
    from spmdc.frontend.repeated import find_block_stack
    from spmdc.frontend.stage_blocks import StageBlocks

    stack, _ = find_block_stack(model)
    for s in split.stages:   # a stage's run of the model's repeated blocks: its programs built from 3 of them
        s.module.repeated_blocks = StageBlocks.find(s.module, stack)
    for name, p in model.named_parameters(remove_duplicate=False):
        split.aliases.setdefault(id(p), []).append(name)
    return split


class StageModule(torch.fx.GraphModule):
    """A stage's fx graph whose ``forward`` runs it node by node under ``preserve_node_meta``: a
    capture of the stage then records each op with the model's module path (``nn_module_stack``)
    and checkpoint region (``custom``), as a capture of the whole model does."""

    def recompile(self) -> Any:
        out = super().recompile()
        type(self).forward = StageModule.interpreted_forward   # (GraphModule sets the generated forward)
        return out

    def interpreted_forward(self, *args: Any) -> Any:
        import torch.fx.traceback as fx_traceback

        with fx_traceback.preserve_node_meta():
            return torch.fx.Interpreter(self, graph=self.graph).run(*args)


def _parameter_only(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """Ops computed from parameters alone (a mixed-precision cast ``p.to(bf16)``, a transpose):
    pure, deterministic, no user input or buffer upstream. A stage reading one recomputes it
    rather than receiving it (a tied weight's cast is then each stage's own, its parameter shared)."""
    import operator

    def parameter(a: torch.fx.Node) -> bool:
        try:
            gm.get_parameter(str(a.target))
        except AttributeError:
            return False
        return True

    out: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or not node.all_input_nodes:
            continue
        schema = getattr(node.target, "_schema", None)
        pure = node.target is operator.getitem or (schema is not None and not schema.is_mutable)
        name = str(getattr(node.target, "__name__", node.target)).split(".")[0].lstrip("_")
        if pure and name not in _RANDOM and all(a in out or (a.op == "get_attr" and parameter(a))
                                                for a in node.all_input_nodes):
            out.add(node)
    return out


def _cut(gm: torch.fx.GraphModule, model: nn.Module, where: dict[torch.fx.Node, int],
         listed: list[list[str]]) -> StageSplit:
    """One fx graph per stage: its ops, the parameters they read (by their model names), the user
    inputs and earlier stages' values they read as inputs, the values later stages read as outputs."""
    n = len(listed)
    placeholders = [x for x in gm.graph.nodes if x.op == "placeholder"]
    values: dict[torch.fx.Node, int] = {}       # boundary node -> value id
    consumers: dict[torch.fx.Node, set[int]] = {}
    copied = _parameter_only(gm)   # recomputed by each stage that reads them, never sent
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        for a in node.all_input_nodes:
            if a in where and where[a] != where[node] and a not in copied:
                consumers.setdefault(a, set()).add(where[node])
    for node in gm.graph.nodes:
        if node in consumers:
            values[node] = len(values)
    loss = gm.graph.output_node().args[0][0]
    grad_dep: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            try:
                p = gm.get_parameter(node.target)
            except AttributeError:
                p = None
            if p is not None and p.requires_grad:
                grad_dep.add(node)
        elif any(a in grad_dep for a in node.all_input_nodes):
            grad_dep.add(node)
    stages: list[Stage] = []
    for k in range(n):
        graph = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        ins: list[tuple[str, int]] = []

        def read(a: torch.fx.Node, k: int = k, graph: torch.fx.Graph = graph, env: dict = env,
                 ins: list = ins) -> torch.fx.Node:
            if a in env:
                return env[a]
            if a.op == "get_attr":
                env[a] = graph.get_attr(a.target)
            elif a in copied and where.get(a) != k:   # a parameter's cast: this stage's own copy
                env[a] = graph.node_copy(a, read)
            elif a.op == "placeholder":
                env[a] = graph.placeholder(a.name)
                ins.append(("input", placeholders.index(a)))
            else:   # a value of an earlier stage
                env[a] = graph.placeholder(a.name)
                ins.append(("value", values[a]))
            env[a].meta = dict(a.meta)
            return env[a]

        mine = [x for x in gm.graph.nodes if where.get(x) == k]
        for node in mine:   # inputs first, in the order the ops read them
            for a in node.all_input_nodes:
                if where.get(a) != k and a.op != "get_attr" and a not in copied:
                    read(a)
        for node in mine:
            for a in node.all_input_nodes:
                if a.op == "get_attr" or (a in copied and where.get(a) != k):
                    read(a)
            env[node] = graph.node_copy(node, lambda a: env[a])
        outs = [x for x in mine if x in values and max(consumers[x]) > k]
        if k == n - 1:
            graph.output((env[loss],))
        else:
            graph.output(tuple(env[x] for x in outs))
        module = StageModule(model, graph)
        stages.append(Stage(k, module, ins, [values[x] for x in outs] if k < n - 1 else [], listed[k],
                            [name for name, _ in module.named_parameters()]))
    infos = {}
    for node, vid in values.items():
        val = node.meta.get("val")
        infos[vid] = BoundaryValue(vid, node.name, tuple(val.shape) if val is not None else (),
                                   val.dtype if val is not None else torch.float32, where[node],
                                   tuple(sorted(consumers[node])), node in grad_dep)
    shared: dict[str, list[int]] = {}
    for s in stages:
        for p in s.params:
            shared.setdefault(p, []).append(s.index)
    return StageSplit(stages, infos, {p: ks for p, ks in shared.items() if len(ks) > 1})
