"""Declarative automation: the rollout rules of the design as automation conditions.

- New document versions are the document sensor's: it adds their partitions and requests one run
  for them (the paid extraction left out when it is above the cost limit: automation then holds it
  for approval). Automation does not request new partitions itself, so one run owns each.
- Changed upstream partitions flow through: an ingestion asset whose upstream partition was
  updated is requested once its dependencies are done.
- A code-version change (a config slice, see code_versions.py) re-materializes the stale asset
  for all its partitions, then its dependents follow through ``eager``, in dependency order,
  ending with ``eval_report`` and its blocking ``eval_gate`` check.
- ``eval_report`` runs once on a fresh instance (``missing_until_requested``), and after a change
  only once every upstream partition of it is written: never while a dependency is in progress or
  requested on the same tick (``upstream_settled``), so one change costs one eval.
- Free work (chunking, references, re-indexing on a local embedder, graph rebuilds) always runs.
- Paid work (LLM extraction, generation evals) calls a model; it runs by itself only when its
  estimated cost is at most ``automation.max_auto_cost_usd`` (default 0). A model that is local
  and unpriced costs 0; a priced model costs its estimate; a hosted model without a price is
  unknown, never free (tokens by rag_engine.ops.estimates, the provider swap dry run's
  estimator: ledger history per call, else a prompt-size bound). Only calls that will be made
  count: extraction counts the chunks the extraction cache does not hold (a re-run after a rules
  change, or a new version's unchanged chunks, is free), and eval_report answers extractively, so
  its eval makes no generation call (``eval_without_generation`` says why). Above the limit the asset is
  *awaiting approval*: the condition is false and logs the estimate (CostWithinLimit says where),
  and nothing downstream of it runs (graph_writes and eval_report wait for it). An operator
  approves by materializing the asset with an approval in its run config (``approved_by``,
  ``reason``, optionally the ``inputs_hash`` of the estimate it saw; the UI's Materialize with
  config, or ``dg launch --assets <pack>/llm_extraction --partition-range A...B --config-json
  ...``): ``rag_engine.governance.approvals`` binds it to the asset, partitions and estimate, and a run above
  the limit without one fails with ``ApprovalRequired`` before any model call; both are audit
  records. The free dependents then follow by themselves.
- Platform assets (domain_packs, usage_costs, audit_daily_summary, graph_quality) run on their
  trigger (a code-version change, a cron) and once on a fresh instance (``never_materialized``).

The cost condition runs Python, so the automation sensor evaluates in the code server
(``use_user_code_server=True``).
"""

from __future__ import annotations

import warnings
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import dagster as dg

from rag_assets.approval import RunApproval, run_approval
from rag_assets.failures import as_failure
from rag_assets.resources import engine_for
from rag_engine.engine import Engine
from rag_engine.errors import RagError, RegistryError
from rag_engine.ingest.extraction_step import uncached_chunks
from rag_engine.ops.estimates import extraction_tokens
from rag_engine.packs import ChunkRecord, DomainPack
from rag_engine.store.connection import probe_store, store_unreachable

if TYPE_CHECKING:  # since_last_handled's return type, which dagster does not export
    from dagster._core.definitions.declarative_automation.automation_condition import BuiltinAutomationCondition

EVAL_ANSWER_TOKENS = 512


# -- cost estimates (engine only, no Dagster state) --------------------------------------------


def model_is_free(engine: Engine, model_name: str) -> bool:
    """A local model without a pricing file price (replay cassettes, llama.cpp, the embedding server):
    its work runs by itself. A provider's ``local_cost`` (machine time) is recorded on every call and
    reported, but it is not paid work held for approval: the machine runs whether or not it is used."""
    spec = engine.registry.spec(model_name)
    return not spec.provider.hosted and spec.model.pricing_ref is None


def required_model(name: str | None, setting: str) -> str:
    """A model name the caller needs: an unset default fails as an unknown model, as the registry would."""
    if name is None:
        raise RegistryError(f"unknown model None ({setting} is not set)")
    return name


def _price(engine: Engine, model_name: str, input_tokens: int, output_tokens: int) -> Decimal | None:
    if model_is_free(engine, model_name):
        return Decimal(0)
    spec = engine.registry.spec(model_name)
    return engine.pricing.price(spec.model.pricing_ref, input_tokens, 0, output_tokens)


def _chunks(engine: Engine, pack: DomainPack, key: str) -> list[ChunkRecord]:
    from rag_engine.ingest.documents import load_document

    try:
        if engine.artifacts.exists(pack.name, key, "chunks"):
            data = engine.artifacts.read(pack.name, key, "chunks")
            return [ChunkRecord.model_validate(c) for c in data] if isinstance(data, list) else []
        # not chunked yet (a new version requested with its whole chain): chunk it here, pure
        return pack.chunk(load_document(pack, key, max_bytes=engine.cfg.max_document_bytes))
    except Exception:  # noqa: BLE001 - an estimate: a document that does not load or chunk counts no calls
        return []


def extraction_estimate(engine: Engine, pack_name: str, keys: list[str]) -> dict[str, Any]:
    """Cost of extracting these document versions again: one call per chunk whose answer the
    extraction cache does not hold (chunks from the chunks artifact, or the pack chunks the document
    now, pure; ``cached`` counts the others, which cost nothing), tokens by the provider swap dry
    run's estimator (ledger history per call, else the prompt-size bound), priced at the model's rate."""
    pack = engine.pack(pack_name)
    name = engine.cfg.defaults.extraction_model
    chunks = [c for key in keys for c in _chunks(engine, pack, key)] if pack.entry.extraction else []
    todo = uncached_chunks(engine, pack, chunks)
    tokens = extraction_tokens(engine, [pack_name], len(todo), sum(len(c.text) for c in todo))
    if tokens.calls:
        model = required_model(name, "defaults.extraction_model")
        cost = _price(engine, model, tokens.input_tokens, tokens.output_tokens)
    else:
        cost = Decimal(0)
    cached = len(chunks) - len(todo)
    return {
        "model": name,
        "calls": tokens.calls,
        "cached": cached,
        "input_tokens": tokens.input_tokens,
        "output_tokens": tokens.output_tokens,
        "tokens_from": tokens.source + (f"; {cached} chunks answered from the extraction cache" if cached else ""),
        "cost_usd": None if cost is None else float(cost),
    }


EVAL_REPORT_GENERATES = False
"""Whether eval_report's eval answers with the generation model. It does not: it scores retrieval
and answers extractively (the top passage, no model call), ``run_eval``'s default; ``python -m
evals.runner`` (``make eval``) is where the model answers, and ``from_report`` records that report."""


def eval_without_generation(engine: Engine, generate: bool = EVAL_REPORT_GENERATES) -> str | None:
    """Why an eval run makes no generation call, or None when each question may make one. The query
    path answers extractively when not asked to generate, or when the default generation model has
    no usable client (``run_query``): such an eval costs nothing, whatever the model's price."""
    name = engine.cfg.defaults.generation_model
    if not generate:
        return "no generation call: eval_report answers extractively (the top passage)"
    try:
        engine.client(name)
    except RagError as exc:
        return f"no generation call: no usable generation model ({name}: {type(exc).__name__}), answered extractively"
    return None


def eval_estimate(engine: Engine, *, generate: bool = EVAL_REPORT_GENERATES) -> dict[str, Any]:
    """Generation cost of one eval run: each golden question with a full context budget, or
    nothing when the eval makes no generation call (``tokens_from`` says why)."""
    from evals.runner import load_golden

    name = engine.cfg.defaults.generation_model
    why = eval_without_generation(engine, generate)
    if why is not None:
        return {"model": name, "calls": 0, "input_tokens": 0, "output_tokens": 0, "tokens_from": why, "cost_usd": 0.0}
    questions = 0
    for path in engine.cfg.evals.golden:
        try:
            questions += len(load_golden(engine.root / path).get("queries", []))
        except Exception:  # noqa: BLE001 - an estimate: an unreadable golden file counts no questions
            continue
    budget = engine.cfg.context
    tokens_in = questions * (budget.system + budget.documents + budget.conversation)
    tokens_out = questions * EVAL_ANSWER_TOKENS
    cost = _price(engine, name, tokens_in, tokens_out) if questions else Decimal(0)
    return {
        "model": name,
        "calls": questions,
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "tokens_from": f"bound: {questions} golden questions x the full context budget in, {EVAL_ANSWER_TOKENS} out",
        "cost_usd": None if cost is None else float(cost),
    }


def extraction_kinds(engine: Engine) -> set[str]:
    """The Dagster kinds of an llm_extraction asset: python, and the kind of the provider that
    answers the extraction model (``openai``, ``openai_compatible`` for a local or other server
    speaking its API, ``replay`` for a recorded cassette), so the UI does not show OpenAI for work
    no OpenAI model does."""
    return {"python", engine.registry.extraction.provider.kind}


def within_limit(engine: Engine, estimate: dict[str, Any]) -> bool:
    cost = estimate["cost_usd"]
    return cost is not None and cost <= engine.cfg.automation.max_auto_cost_usd


class PaidApproval(RunApproval):
    """Run config of a paid asset: the operator's approval (``rag_assets.approval``: approved_by,
    reason, the inputs_hash the refusal printed, and key_file with principals configured), needed
    when the run's estimated cost is above automation.max_auto_cost_usd (or unknown)."""


def paid_inputs(asset: str, partitions: list[str], estimate: dict[str, Any]) -> dict[str, Any]:
    """What an approval of paid work binds: the asset, its partitions and the estimate it was shown."""
    return {"asset": asset, "partitions": sorted(partitions), "estimate": estimate}


def require_paid_approval(
    context: dg.AssetExecutionContext, engine: Engine, estimate: dict[str, Any], config: PaidApproval
) -> None:
    """Before any model call: nothing to approve under the limit; above it, the approval in the run
    config must bind this asset, its partitions and the estimate (``paid_automation``)."""
    from rag_engine.governance.approvals import PAID_AUTOMATION, require
    from rag_engine.governance.audit import audit_trail

    if within_limit(engine, estimate):
        return
    partitioned = context.has_partition_key or context.has_partition_key_range
    partitions = sorted(context.partition_keys) if partitioned else []
    inputs = paid_inputs(context.asset_key.to_user_string(), partitions, estimate)
    approval, actor = run_approval(
        engine,
        config,
        action=PAID_AUTOMATION,
        run_id=context.run.run_id,
        command=f"paid run of {inputs['asset']}",
        tags=context.run.tags,
    )
    context.log.info(
        "paid work above automation.max_auto_cost_usd (estimate %s USD, %s calls of %s): %s",
        estimate["cost_usd"] if estimate["cost_usd"] is not None else "unknown",
        estimate["calls"],
        estimate["model"],
        f"approved by {approval.approved_by}" if approval else "needs approved_by and reason in the run config",
    )
    require(approval, PAID_AUTOMATION, inputs, audit=audit_trail(engine), actor=actor, run_id=context.run.run_id)


# -- conditions ---------------------------------------------------------------------------------


class CostWithinLimit(dg.AutomationCondition):
    """True when the paid work this asset would do now is estimated at most
    automation.max_auto_cost_usd; false means *awaiting approval*.

    In the UI the asset's automation evaluation shows this node false with its description; the UI
    renders no metadata of a condition's evaluation, so the estimate behind a false (model, calls,
    tokens and where they come from, cost, the limit, the inputs hash an approval binds) is
    published as the asset's ``approval_status`` check by the ``paid_work_approval_status`` sensor
    (``rag_assets.approval_status``). It is also a WARNING on the evaluation's logger
    (``context.log``), in the code server's log output."""

    def __init__(self, config_path: str, kind: str):
        self.config_path = config_path
        self.kind = kind  # "extraction" | "eval"

    @property
    def name(self) -> str:
        return "cost_within_limit"

    @property
    def description(self) -> str:
        return (
            "estimated cost <= automation.max_auto_cost_usd (else awaiting approval: materialize the asset to approve)"
        )

    def evaluate(self, context: dg.AutomationContext) -> dg.AutomationResult:
        candidates = context.candidate_subset
        if candidates.is_empty:
            return dg.AutomationResult(context, true_subset=candidates)
        engine = engine_for(self.config_path)
        keys = sorted(candidates.expensively_compute_partition_keys()) if self.kind == "extraction" else []
        estimate = estimate_or_hold(engine, self.kind, context.key, keys, context.log)
        if estimate is None:  # no estimate (the store is down): paid work is held, nothing else happens
            return dg.AutomationResult(context, true_subset=context.get_empty_subset())
        ok = within_limit(engine, estimate)
        limit = engine.cfg.automation.max_auto_cost_usd
        if not ok:
            cost = (
                "unknown (hosted model without a price)"
                if estimate["cost_usd"] is None
                else f"${estimate['cost_usd']:.4f}"
            )
            context.log.warning(
                "%s awaiting approval: estimated cost %s for %d calls of %s (%d input + %d output tokens, %s) > "
                "automation.max_auto_cost_usd $%s; materialize it with approved_by and reason to approve",
                context.key.to_user_string(),
                cost,
                estimate["calls"],
                estimate["model"],
                estimate["input_tokens"],
                estimate["output_tokens"],
                estimate["tokens_from"],
                limit,
            )
        return dg.AutomationResult(context, true_subset=candidates if ok else context.get_empty_subset())


def estimate_or_hold(
    engine: Engine, kind: str, key: dg.AssetKey, partitions: list[str], log: Any
) -> dict[str, Any] | None:
    """The estimate ``CostWithinLimit`` judges, or None when it cannot be made: a typed engine error
    or a stopped store (the extraction estimate reads the extraction runs in Neo4j) is one warning
    line, the store probed first (2 s) so the automation tick does not wait out the driver's
    retries; paid work without an estimate is held. A bug keeps its traceback."""
    try:
        if kind != "extraction":
            return eval_estimate(engine)
        probe_store(engine.neo4j_target, engine.env)
        return extraction_estimate(engine, key.path[0], partitions)
    except Exception as exc:
        if not isinstance(exc, RagError) and store_unreachable(exc) is None:
            raise
        log.warning(
            "%s; held, not estimated (the next tick tries again)", as_failure(key.to_user_string(), exc).description
        )
        return None


def since_last_handled(condition: dg.AutomationCondition[Any]) -> BuiltinAutomationCondition[Any]:
    """``condition.since_last_handled()``: dagster types its self as
    AutomationCondition[AssetKey | AssetCheckKey] (invariant), which an asset condition is not."""
    return condition.since_last_handled()


def _triggered() -> dg.AutomationCondition:
    """Updated upstream partitions, or this asset's own code version: a change to what exists.

    New partitions are not a trigger: the document sensor that adds them requests their run, so
    one run owns a new document version (with both, the sensor's run and an automation run of
    the same assets started together on one partition)."""
    return (
        since_last_handled(dg.AutomationCondition.any_deps_updated() | dg.AutomationCondition.code_version_changed())
    ).with_label("updated deps or changed code version")


def missing_until_requested() -> dg.AutomationCondition:
    """Missing since the tick it became missing (a fresh instance's first tick included), until it is
    requested or materialized: ``on_missing``'s trigger without ``since_last_handled``'s
    ``initial_evaluation`` reset, which on a fresh instance fires on the very tick ``newly_missing``
    does and so cancels it (the asset stayed "Not evaluated" until something changed). Requested
    once: a failed run leaves it missing, but not newly missing, so it is not requested again."""
    return (
        dg.AutomationCondition.missing()
        .newly_true()
        .since(dg.AutomationCondition.newly_requested() | dg.AutomationCondition.newly_updated())
    ).with_label("missing since last requested")


def _eval_triggered() -> dg.AutomationCondition:
    """eval_report (one partition-less asset): never evaluated (a fresh instance too), or updated
    deps or its code version since it was last requested. Not since it was last *updated*
    (``since_last_handled``): a change written while an eval runs would be reset by that eval's
    own materialization, and the gate would never judge it."""
    requested = dg.AutomationCondition.newly_requested() | dg.AutomationCondition.initial_evaluation()
    return (
        missing_until_requested()
        | (dg.AutomationCondition.any_deps_updated() | dg.AutomationCondition.code_version_changed()).since(
            requested.with_label("requested")
        )
    ).with_label("missing, updated deps or changed code version")


def upstream_settled() -> dg.AutomationCondition:
    """No dependency in progress (a run or backfill that has not written it yet) or requested on
    this tick: eval_report waits for every partition of a change. Its trigger survives the wait
    (it is reset only when eval_report itself is requested), so a change of many partitions, or a
    chain of ingestion steps, costs one eval, after the last of them."""
    return (
        ~dg.AutomationCondition.any_deps_in_progress()
        & ~dg.AutomationCondition.any_deps_match(dg.AutomationCondition.will_be_requested()).with_label(
            "any_deps_requested"
        )
        & ~dg.AutomationCondition.in_progress()
    ).with_label("upstream settled")


def _not_busy() -> dg.AutomationCondition:
    return ~dg.AutomationCondition.any_deps_in_progress() & ~dg.AutomationCondition.in_progress()


def awaiting_approval(config_path: str, kind: str) -> dg.AutomationCondition:
    return (_triggered() & ~CostWithinLimit(config_path, kind)).with_label("awaiting approval")


def _written_before() -> dg.AutomationCondition:
    """The partition was materialized before: automation updates what exists, it never fills in
    partitions nobody asked for. A new version's partitions belong to the sensor's run; when an
    operator cancels that run, the chunks it wrote must not make automation run the rest."""
    return (~dg.AutomationCondition.missing()).with_label("written before")


def _free_core() -> dg.AutomationCondition:
    return _triggered() & ~dg.AutomationCondition.any_deps_missing() & _not_busy()


def free_step() -> dg.AutomationCondition:
    """Ingestion steps with no model call (or only the local embedder), on partitions written before."""
    return (_free_core() & _written_before()).with_label("free: eager + code version, written before")


def paid_step(config_path: str) -> dg.AutomationCondition:
    """llm_extraction: like a free step, under the cost limit; unlike the free steps it may run on
    partitions never written (a new version's extraction held for approval runs when the limit is
    raised), so a cancelled run's extraction under the limit still runs (known gap)."""
    return (_free_core() & CostWithinLimit(config_path, "extraction")).with_label(
        "paid: eager + code version, under cost limit"
    )


EXTRACTION = dg.AssetSelection.tag("model", "extraction")
"""The llm_extraction assets: the only deps whose approval graph_writes and eval_report wait for.
Limiting the dep conditions to them keeps the condition tree small: Dagster serializes every
node's partition subsets on each tick, a cost per node and partitioned asset."""


def _extraction_waiting(config_path: str) -> dg.AutomationCondition:
    return dg.AutomationCondition.any_deps_match(awaiting_approval(config_path, "extraction")).allow(EXTRACTION)


def graph_step(config_path: str) -> dg.AutomationCondition:
    """graph_writes: free, but waits while its extraction awaits approval (one rebuild, not two)."""
    after_extraction = since_last_handled(dg.AutomationCondition.any_deps_updated().allow(EXTRACTION))
    return (_free_core() & (_written_before() | after_extraction) & ~_extraction_waiting(config_path)).with_label(
        "free: eager + code version, after approved extraction"
    )


def eval_step(config_path: str, graph_keys: list[dg.AssetKey]) -> dg.AutomationCondition:
    """eval_report: after any pack's index or graph changed, never while a pack's graph
    (``graph_keys``) waits for an extraction's approval; the generation model is paid work."""
    upstream_waiting = dg.AutomationCondition.any_deps_match(_extraction_waiting(config_path)).allow(
        dg.AssetSelection.assets(*graph_keys)
    )
    return (
        _eval_triggered() & upstream_settled() & ~upstream_waiting & CostWithinLimit(config_path, "eval")
    ).with_label("paid: after index/graph changes have settled, under cost limit")


def never_materialized() -> dg.AutomationCondition:
    """Missing, not in progress and not failed: a platform asset's first run on a fresh instance.

    Their other triggers miss it: ``since_last_handled`` counts the initial evaluation as handled
    (``newly_missing`` is true on that very tick, so it is reset at once), and a cron waits for its
    next tick. ``~execution_failed`` keeps a failed first run from being requested again on every
    tick; its cron, a code change or an operator runs it again."""
    return (
        dg.AutomationCondition.missing()
        & ~dg.AutomationCondition.in_progress()
        & ~dg.AutomationCondition.execution_failed()
    ).with_label("never materialized")


def on_cron_or_first(cron: str) -> dg.AutomationCondition:
    """A platform asset without deps: on its cron (UTC), and once on a fresh instance."""
    return (dg.AutomationCondition.on_cron(cron, "UTC") | never_materialized()).with_label(
        f"on_cron({cron}, UTC) or never materialized"
    )


def on_change_or_first() -> dg.AutomationCondition:
    """domain_packs: when its code version (the enabled packs and their load errors) changes, and
    once on a fresh instance, so its ``packs_loaded`` check runs without waiting for a change."""
    return (
        (since_last_handled(dg.AutomationCondition.code_version_changed()) | never_materialized())
        & ~dg.AutomationCondition.in_progress()
    ).with_label("changed code version or never materialized")


def nightly() -> dg.AutomationCondition:
    """graph_quality: every night at 03:00 UTC (it reads the whole graph; no asset deps), and once
    on a fresh instance."""
    return (
        (since_last_handled(dg.AutomationCondition.cron_tick_passed("0 3 * * *", "UTC")) | never_materialized())
        & ~dg.AutomationCondition.in_progress()
    ).with_label("nightly 03:00 UTC or never materialized")


def automation_sensor() -> dg.AutomationConditionSensorDefinition:
    with warnings.catch_warnings():  # use_user_code_server is beta; the cost condition needs it
        warnings.simplefilter("ignore", dg.BetaWarning)
        return _sensor()


def _sensor() -> dg.AutomationConditionSensorDefinition:
    return dg.AutomationConditionSensorDefinition(
        "rag_automation",
        target=dg.AssetSelection.all(),
        use_user_code_server=True,
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=60,
        description="Evaluates every asset's automation condition: new document versions, code-version "
        "changes (free work at once, paid work under automation.max_auto_cost_usd).",
    )
