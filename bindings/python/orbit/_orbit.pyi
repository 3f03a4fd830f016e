# Type stub of orbit's compiled module (bindings/python/src/*.cpp). Keep in step with the bindings:
# tests/python/test_bindings.py checks that every public name and member is listed here.
import enum
import os
from typing import Callable, Iterator, Literal, Optional, Sequence, SupportsIndex, Union

import numpy
import numpy.typing
from ._stream import GenerationStream

__version__: str

# Anything accepted as token ids: a sequence of ints (numpy integer scalars too, anything __index__ makes an int of;
# a bool is refused), a 1-D integer numpy array or torch tensor.
Tokens = Union[Sequence[SupportsIndex], numpy.ndarray, "torch.Tensor"]  # noqa: F821
# Positions for embeddings' rows: [3, n] or [n] integers, as an array, a tensor or (nested) sequences.
Grid = Union[numpy.ndarray, "torch.Tensor", Sequence[SupportsIndex], Sequence[Sequence[SupportsIndex]]]  # noqa: F821
# An instance: its id (an int, or an integer __index__ gives, such as numpy.int64; not a bool) or its InstanceInfo.
InstanceArg = Union[int, SupportsIndex, "InstanceInfo"]
# A chunk: its ChunkRef or its key.
ChunkArg = Union["ChunkRef", str]
PolicyArg = Union["WindowPolicy", str]
# A message list as a chat API takes it: dicts with "role" and "content" (a str, or a list of parts: text dicts,
# {"type": "chunk", "chunk": ChunkRef} or a ChunkRef), and "name", "tool_call_id", "tool_calls", "reasoning_content"
# (a str: an earlier assistant turn's thinking, given to the template as message.reasoning_content).
Messages = Sequence[dict]

class OrbitError(RuntimeError):
    """Misuse or bad input reported by the C++ core; str(e) is the C++ message, an option named by the keyword
    that sets it (Engine(max_idle_chunks=4), sync's tools), not by its C++ field."""
    source: Optional[str]
    status: Optional[str]
    reason: str

class CapacityError(OrbitError):
    """The pool or the window's max_bytes cannot hold the result (status 'out_of_capacity')."""

class RefusedError(OrbitError):
    """The operation was refused, e.g. positions past the model's limit: a plan's refusal, and sync or generate
    past them (status 'refused')."""

class OrbitWarning(UserWarning):
    """A warning from orbit's store or SDK: a disk write that failed, an engine closed with entries that never
    reached the disk, a corrupt blob, a remote tier that went down or has no secret. One raised during a call
    (Engine(...), close()) is issued before that call returns; one from background work on the main thread at
    its next bytecode, where an 'error' filter reports it through sys.unraisablehook."""

class RemoteUnreachableWarning(OrbitWarning, RuntimeWarning):
    """Engine(remote=...) found the remote tier not answering a PING when it opened; the message names the URL
    (password shown as ***) and the cause. The engine still opens, on its local tiers. An OrbitWarning (filtered
    with orbit's other warnings) and a RuntimeWarning."""

class _Enum:
    def __init__(self, value: int) -> None:
        """The member holding value; ValueError naming the enum and its members when none does."""
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    @property
    def label(self) -> str:
        """The C++ name, e.g. 'apply-patch'."""
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...

class ChunkKind(_Enum):
    """What a chunk holds."""
    tokens: "ChunkKind"
    embeddings: "ChunkKind"

class Operation(_Enum):
    """A window operation."""
    admit: "Operation"
    add_turn: "Operation"
    evict: "Operation"
    slide: "Operation"
    recall: "Operation"
    reorder: "Operation"
    recondition: "Operation"
    flush: "Operation"
    heal: "Operation"
    sync: "Operation"

class StepAction(_Enum):
    """What a plan step does to one instance."""
    keep: "StepAction"
    canonical: "StepAction"
    apply_patch: "StepAction"
    load_conditioned: "StepAction"
    form: "StepAction"
    reprefill: "StepAction"
    blind: "StepAction"
    recompute: "StepAction"
    prefill_turn: "StepAction"
    evict: "StepAction"

class PatchMatch(_Enum):
    """How the patch of an apply_patch step was found."""
    none: "PatchMatch"
    exact: "PatchMatch"
    orbit: "PatchMatch"
    stale: "PatchMatch"

class MissAction(_Enum):
    """What a window does when no usable stored patch exists."""
    form: "MissAction"
    blind: "MissAction"
    reprefill: "MissAction"
    token_recompute: "MissAction"
    first_k: "MissAction"

class SurvivorAction(_Enum):
    """What happens to instances whose context changed."""
    keep: "SurvivorAction"
    recondition: "SurvivorAction"

class StalePatch(_Enum):
    """Whether a patch formed under another context may be used."""
    rebuild: "StalePatch"
    accept: "StalePatch"

class BackgroundMode(_Enum):
    """Where a chunk's canonical and patch are formed after its first sight (Engine(background=...))."""
    thread: "BackgroundMode"
    deferred: "BackgroundMode"
    inline: "BackgroundMode"

class StoreTier(_Enum):
    """A tier of the chunk store."""
    device: "StoreTier"
    host: "StoreTier"
    disk: "StoreTier"
    remote: "StoreTier"

class ChunkRef:
    """A handle to a registered chunk; compares and hashes by key."""
    @property
    def key(self) -> str: ...
    @property
    def kind(self) -> ChunkKind: ...
    @property
    def length(self) -> int: ...
    @property
    def extent(self) -> int: ...
    @property
    def label(self) -> str: ...
    @property
    def valid(self) -> bool: ...
    def __len__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __ne__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class PlanStep:
    """What one plan step does to one instance."""
    @property
    def action(self) -> StepAction: ...
    @property
    def instance(self) -> int: ...
    @property
    def chunk(self) -> ChunkRef: ...
    @property
    def is_turn(self) -> bool: ...
    @property
    def position(self) -> int: ...
    @property
    def match(self) -> PatchMatch: ...
    @property
    def turn_tokens(self) -> list[int]: ...
    @property
    def patch_key(self) -> str: ...
    @property
    def store_keys(self) -> list[str]: ...
    @property
    def divergence(self) -> float: ...
    @property
    def rank_k(self) -> int: ...
    @property
    def rank_v(self) -> int: ...
    @property
    def needs_canonical(self) -> bool: ...
    @property
    def encode_canonical(self) -> bool: ...
    @property
    def canonical_tier(self) -> StoreTier: ...
    @property
    def forward_tokens(self) -> float: ...
    @property
    def background_tokens(self) -> float: ...
    @property
    def measure_sensitivity(self) -> bool: ...
    @property
    def estimated_seconds(self) -> float: ...
    @property
    def bytes_moved(self) -> int: ...
    @property
    def exact(self) -> bool: ...
    @property
    def deferred(self) -> bool: ...
    @property
    def how(self) -> str: ...
    @property
    def predicted_kl(self) -> float: ...
    @property
    def shortfall_kl(self) -> float:
        """Of predicted_kl, dynamic-NTK RoPE's: content formed in a window of another length than the window
        after the plan; 0 for every other model."""
    @property
    def quantized_kl(self) -> float:
        """Of predicted_kl, the int8 cold tier's: the stored KV this step reads came back from int8 rows; 0 for
        exact KV."""
    @property
    def reused_tokens(self) -> int:
        """Leading rows loaded from KV stored behind the same tokens and KV states; 0: none."""
    @property
    def reused_formed_window(self) -> int:
        """Dynamic-NTK RoPE past the anchor: the window length the loaded rows were formed at when it is not
        the plan's rope window (a read's query and answer, loaded by the next turn); 0 otherwise."""
    @property
    def sensitivity(self) -> float: ...
    @property
    def reason(self) -> str: ...

class Plan:
    """What an operation would do; pass to Window.apply()."""
    @property
    def op(self) -> Operation: ...
    @property
    def window_id(self) -> int: ...
    @property
    def window_version(self) -> int: ...
    @property
    def steps(self) -> list[PlanStep]: ...
    @property
    def order(self) -> list[int]: ...
    @property
    def forward_tokens(self) -> float: ...
    @property
    def background_tokens(self) -> float: ...
    @property
    def predicted_kl(self) -> float:
        """The fidelity model's next-token KL vs a re-prefill after apply (sum over steps); a budgeted policy keeps
        it within policy.kl_budget when it can. What it predicts: KL(p_ref || p), p_ref from
        Window.reference_logits and p from Window.logits (all_rows=True) of a short query read after the window
        (a few tokens of text), averaged over the query's rows; not the largest row's, which runs several times
        the mean. An estimate from plan metadata, not a bound: on the bundled models it errs high on text that starts
        afresh and can err low on random ids (planner/fidelity_model.h). Until Engine.calibrate_fidelity() (or a
        stored calibration) fits it on this model, it is stories260K's fit, which can err low several-fold on
        another model's text: on tinystories-656k, messages moved by a dropped one were predicted 1.9e-3 and
        measured 6.3e-3 (calibrated, the same edit was re-formed, exact)."""
    @property
    def estimated_seconds(self) -> float: ...
    @property
    def policy(self) -> "WindowPolicy": ...
    @property
    def attention(self) -> str: ...
    @property
    def bytes_moved(self) -> int: ...
    @property
    def device_bytes_after(self) -> int: ...
    @property
    def window_tokens_after(self) -> int: ...
    @property
    def rope_window(self) -> int:
        """Dynamic-NTK RoPE past its anchor: the window length the plan's forwards run at (window_tokens_after);
        0 (each forward at its own end) for every other model and window."""
    @property
    def exact(self) -> bool: ...
    @property
    def cascade(self) -> list[int]: ...
    @property
    def refusal(self) -> str:
        """Non-empty: apply() will refuse the plan with this reason (nothing runs; the totals are 0)."""
    @property
    def refused_capacity(self) -> bool:
        """The refusal is a capacity one (apply raises CapacityError; else RefusedError)."""
    @property
    def pool_pages_short(self) -> int:
        """A refusal for the engine's KV pool: the pages the plan needs beyond those free as of planning
        (how much room closing other windows must give back); 0 for any other plan."""
    def count(self, action: StepAction) -> int: ...
    def describe(self) -> str: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[PlanStep]: ...

class IdleReport:
    """What Window.idle() (or heal / prepare_recalls / prepare_moves) did with idle time; all background work."""
    @property
    def predicted_kl(self) -> float: ...
    @property
    def heal_planned(self) -> bool:
        """Window.idle() planned a heal: what it would re-form was predicted at least policy.heal_min_kl (or the
        sampled self-check chose the window); not when only what the heal keeps passes the threshold."""
    @property
    def healed_instances(self) -> int: ...
    @property
    def heal_forward_tokens(self) -> float: ...
    @property
    def heal_refused(self) -> str:
        """Why the heal the window needed did not run in Window.idle() (no room in the KV pool), or ''."""
    @property
    def recalls_prepared(self) -> int: ...
    @property
    def moves_prepared(self) -> int: ...
    @property
    def lists_prepared(self) -> int: ...
    @property
    def hints_trusted(self) -> bool:
        """Window.idle() prepared no learned lists or moves: the agent's own prepare_sync hints reached as far
        as they would have for WindowPolicy.trust_hints syncs in a row. From prepare_sync: the hint was also
        prepared one message further (the learned lists and moves that are the hint and one message more)."""
    @property
    def predictions_missed(self) -> bool:
        """Window.idle() prepared no learned lists or moves: those learned from the agent's last edits would
        not have served its syncs since (an edit made once, such as a summary, is not prepared again at every
        step; WindowPolicy.prepare_lists)."""
    @property
    def stopped(self) -> bool: ...
    @property
    def instances_prepared(self) -> int: ...
    @property
    def prepare_forward_tokens(self) -> float: ...
    @property
    def checked(self) -> bool:
        """The heal measured the loss the window carried (WindowPolicy.self_check)."""
    @property
    def measured_kl(self) -> float: ...
    @property
    def check_forward_tokens(self) -> float: ...
    @property
    def fidelity_correction(self) -> float: ...
    @property
    def forward_tokens(self) -> float: ...
    @property
    def seconds(self) -> float: ...

class ApplyReport:
    """What apply() did (measured)."""
    @property
    def op(self) -> Operation: ...
    @property
    def forward_tokens(self) -> float: ...
    @property
    def patches_formed(self) -> int: ...
    @property
    def patch_hits(self) -> int: ...
    @property
    def canonicals_encoded(self) -> int: ...
    @property
    def bytes_moved(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def device_bytes(self) -> int: ...
    @property
    def added(self) -> list[int]: ...
    @property
    def removed(self) -> list[int]: ...

class InstanceInfo:
    """One instance as the window holds it; accepted wherever an instance id is."""
    @property
    def id(self) -> int: ...
    @property
    def chunk(self) -> ChunkRef: ...
    @property
    def is_turn(self) -> bool: ...
    @property
    def turn_tokens(self) -> list[int]: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def formed_by(self) -> StepAction: ...
    @property
    def match(self) -> PatchMatch: ...
    @property
    def exact(self) -> bool: ...
    @property
    def context_changed(self) -> bool: ...
    @property
    def attention(self) -> float: ...
    @property
    def deferred(self) -> bool: ...
    @property
    def patch_key(self) -> str: ...
    def __int__(self) -> int: ...
    def __index__(self) -> int: ...

class WindowStats:
    """A window's counters."""
    @property
    def instances(self) -> int: ...
    @property
    def chunk_instances(self) -> int: ...
    @property
    def turns(self) -> int: ...
    @property
    def tokens(self) -> int: ...
    @property
    def device_bytes(self) -> int: ...
    @property
    def shared_pages(self) -> int: ...
    @property
    def past_bytes(self) -> int:
        """Host bytes of the window's KV kept as one contiguous past between reads (Engine's window_past; 0 when
        off, on CUDA, or before a read); buffers a fork shares with its parent are counted in both."""
    @property
    def evicted(self) -> int: ...
    @property
    def forward_tokens(self) -> float: ...
    @property
    def critical_forward_tokens(self) -> float:
        """Of forward_tokens: those on the critical path (heals and idle-time preparation excluded; the
        canonical disposable encodes when none is stored included, as in EngineStats)."""
    @property
    def query_forward_tokens(self) -> float:
        """Query tokens this window's generate and disposable calls forwarded (not in forward_tokens)."""
    @property
    def logits_forward_tokens(self) -> float:
        """Query tokens this window's logits() calls forwarded (not in forward_tokens)."""
    @property
    def prefix_cache_tokens(self) -> float:
        """What a prefix cache would have forwarded for the same operations: the saving's denominator."""
    @property
    def radix_cache_tokens(self) -> float:
        """What a radix cache would forward for this window's generate and disposable calls: compare with
        critical_forward_tokens + query_forward_tokens."""
    @property
    def operations(self) -> int: ...

class TierStats:
    """Counters of one store tier."""
    @property
    def tier(self) -> StoreTier: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def entries(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def budget_bytes(self) -> int: ...
    @property
    def policy(self) -> str:
        """'lru' or 'cost-aware'."""
    @property
    def pinned_entries(self) -> int: ...
    @property
    def hits(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def demotions(self) -> int: ...
    @property
    def promotions(self) -> int: ...

class StoreStats:
    """The chunk store's counters."""
    @property
    def tiers(self) -> list[TierStats]: ...
    @property
    def canonical_encoding(self) -> "BlobEncoding": ...
    @property
    def pinned_host(self) -> bool: ...
    @property
    def misses(self) -> int: ...
    @property
    def internal_reads(self) -> int: ...
    @property
    def refusals(self) -> int: ...
    @property
    def corrupt_reads(self) -> int: ...
    @property
    def unreadable_reads(self) -> int: ...
    @property
    def io_errors(self) -> int: ...
    @property
    def demotions_lost(self) -> int: ...
    @property
    def disk_degraded(self) -> bool: ...
    @property
    def disk_warning(self) -> str: ...
    @property
    def remote(self) -> RemoteStats: ...

class RemoteStats:
    """The remote tier's counters (StoreStats.remote)."""
    @property
    def enabled(self) -> bool: ...
    @property
    def url(self) -> str: ...
    @property
    def available(self) -> bool: ...
    @property
    def hits(self) -> int: ...
    @property
    def misses(self) -> int: ...
    @property
    def corrupt(self) -> int: ...
    @property
    def incomplete(self) -> int: ...
    @property
    def unauthenticated(self) -> int: ...
    @property
    def errors(self) -> int: ...
    @property
    def outages(self) -> int: ...
    @property
    def skipped(self) -> int: ...
    @property
    def internal_reads(self) -> int: ...
    @property
    def writes(self) -> int: ...
    @property
    def write_failures(self) -> int: ...
    @property
    def writes_dropped(self) -> int: ...
    @property
    def resent(self) -> int: ...
    @property
    def resend_backlog(self) -> int: ...
    @property
    def abandoned(self) -> int: ...
    @property
    def queued(self) -> int: ...
    @property
    def removals(self) -> int: ...
    @property
    def bytes_read(self) -> int: ...
    @property
    def bytes_written(self) -> int: ...
    @property
    def read_seconds(self) -> float: ...
    @property
    def last_error(self) -> str: ...

class EngineStats:
    """An engine's counters."""
    @property
    def chunks(self) -> int: ...
    @property
    def windows(self) -> int: ...
    @property
    def pool_pages(self) -> int: ...
    @property
    def pool_free_pages(self) -> int: ...
    @property
    def pool_bytes_used(self) -> int: ...
    @property
    def pool_canonical_sets(self) -> int: ...
    @property
    def pool_canonical_pages(self) -> int: ...
    @property
    def pool_placements(self) -> int: ...
    @property
    def pool_patches(self) -> int: ...
    @property
    def pool_patch_bytes(self) -> int: ...
    @property
    def canonicals_encoded(self) -> int: ...
    @property
    def patches_formed(self) -> int: ...
    @property
    def patch_hits(self) -> int: ...
    @property
    def forward_tokens(self) -> float:
        """Critical-path plus background token-forwards of the windows' operations (reads' queries apart)."""
    @property
    def critical_forward_tokens(self) -> float:
        """Token-forwards inside apply() and the canonicals encoded on the caller's thread (precompute's,
        disposable's when none is stored): what the next token waits for."""
    @property
    def background_forward_tokens(self) -> float:
        """Token-forwards of background jobs (canonical encodes)."""
    @property
    def query_forward_tokens(self) -> float:
        """Query tokens the windows' generate and disposable calls forwarded (not in forward_tokens)."""
    @property
    def logits_forward_tokens(self) -> float:
        """Query tokens the windows' logits() calls forwarded (not in forward_tokens)."""
    @property
    def prefix_cache_tokens(self) -> float:
        """What a prefix cache would have forwarded on the critical path for the same window operations."""
    @property
    def radix_cache_tokens(self) -> float:
        """What a radix cache would have forwarded for every window's generate and disposable calls: compare
        with critical_forward_tokens + query_forward_tokens."""
    @property
    def critical_seconds(self) -> float:
        """Wall time inside apply()."""
    @property
    def background_seconds(self) -> float:
        """Wall time of background jobs."""
    @property
    def check_forward_tokens(self) -> float:
        """Background token-forwards of the self-check's probes (WindowPolicy.self_check)."""
    @property
    def fidelity_correction(self) -> float:
        """The factor the engine scales its fidelity model's predictions by (1 until a self-check raises it)."""
    @property
    def fidelity_checks(self) -> int: ...
    @property
    def background_jobs(self) -> int: ...
    @property
    def background_pending(self) -> int:
        """Jobs queued, not started (under 'deferred' until run_background())."""
    @property
    def background_failed(self) -> int: ...
    @property
    def background_error(self) -> str: ...
    @property
    def media_found(self) -> int: ...
    @property
    def media_missed(self) -> int: ...
    @property
    def background_pending_bytes(self) -> int:
        """The KV the queued background jobs hold (EngineOptions.max_background_bytes bounds it)."""
    @property
    def background_dropped(self) -> int:
        """Queued background jobs dropped past max_background_bytes (their patches not formed)."""
    @property
    def constraint_cache(self) -> ConstraintCacheStats:
        """The compiled constraints Window.generate keeps (tools, tool_choice, response_format)."""
    @property
    def store(self) -> StoreStats: ...
    @property
    def patch_catalog(self) -> TableUsage:
        """What patches exist for each chunk and context (records; bytes, about 16 MiB)."""
    @property
    def turn_lengths(self) -> TableUsage:
        """The token counts of turns seen, which weigh stale patches' contexts (65,536)."""
    @property
    def prefix_ledger(self) -> TableUsage:
        """The prefix-cache yardstick's prefixes (65,536)."""
    @property
    def radix_yardstick(self) -> TableUsage:
        """The radix yardstick's tokens (the pool and host tier's tokens at most)."""
    @property
    def tokenizer_cache(self) -> TableUsage:
        """The tokenizer's cache of split words (a Hugging Face BPE's: 10,000 words, 16 MiB)."""
    @property
    def reuse_index(self) -> TableUsage:
        """The token sequences exact reuse finds KV by (65,536; bytes: their token ids, 16 MiB)."""

class TableUsage:
    """One of the engine's in-memory tables that grow with the distinct content it sees: what it holds and its
    bounds (a bound of 0: not bounded that way; bytes 0: not counted)."""
    @property
    def entries(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def max_entries(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...

class ConstraintCacheOptions:
    """Bounds of an engine's cache of compiled constraints (orbit/constraint_cache.h): Engine(constraint_cache=...),
    read back as EngineOptions.constraint_cache; Engine.stats.constraint_cache counts what it holds."""
    def __init__(self, *, max_entries: SupportsIndex = 64, max_bytes: SupportsIndex = 268435456) -> None:
        """max_entries: constraints kept at most (0 keeps nothing: every call compiles); max_bytes: the bytes they
        hold at most, grammars and token masks counted (the entry just used is kept even past it). Past either
        bound the least recently used are dropped first. ValueError naming the field for a negative value."""
    @property
    def max_entries(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...

class ConstraintCacheStats:
    """The engine's cache of compiled constraints (orbit/constraint_cache.h), keyed by generate's arguments."""
    @property
    def entries(self) -> int: ...
    @property
    def bytes(self) -> int:
        """All the entries hold, grammars and token masks counted, recounted when read (past max_bytes the least
        recently used are dropped first)."""
    @property
    def hits(self) -> int:
        """Lookups answered without compiling."""
    @property
    def misses(self) -> int:
        """Lookups that compiled (refusals included: they are not kept)."""
    @property
    def max_entries(self) -> int: ...
    @property
    def max_bytes(self) -> int: ...

class ModelInfo:
    """The engine's model."""
    @property
    def origin(self) -> str: ...
    @property
    def architecture(self) -> str: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_positions(self) -> int: ...
    @property
    def position_rows(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def kv_bytes_per_token(self) -> int: ...
    @property
    def device(self) -> str:
        """Where the model runs: 'cpu', 'cuda:0', ..."""
    @property
    def dtype(self) -> str:
        """Compute dtype: 'float32', 'bfloat16' or 'float16'."""
    @property
    def tokenizer(self) -> str:
        """The tokenizer file in use ('' = none: text calls raise OrbitError)."""
    @property
    def bos_token(self) -> int:
        """The tokenizer's BOS id; -1 when none. It ends a generate run (unless ignore_eos=True)."""
    @property
    def eos_token(self) -> int:
        """The tokenizer's EOS id; -1 when none. It ends a generate run (unless ignore_eos=True)."""

class CalibrationReport:
    """What Engine.calibrate / calibrate_fidelity measured and fitted."""
    @property
    def samples(self) -> int:
        """Timings the cost model was fitted on (0: calibrate_fidelity, the cost model left as it was)."""
    @property
    def seconds(self) -> float: ...
    @property
    def cost_model(self) -> str:
        """The fitted cost coefficients, one line ('' when the cost model was left as it was)."""
    @property
    def remote_bytes_per_s(self) -> float: ...
    @property
    def fidelity_samples(self) -> int: ...
    @property
    def fidelity_model(self) -> str:
        """The fidelity model plans use now, one line."""
    @property
    def shortfall_samples(self) -> int:
        """Of fidelity_samples, those measuring dynamic-NTK RoPE's shortfall; 0 on a model without it."""
    @property
    def shortfall_coefficient(self) -> float:
        """The shortfall coefficient plans now price with (0: none measured, the default 0.29 stays)."""
    @property
    def stored(self) -> bool:
        """True when the deficits were written to the store for engines opening this model on it later (False
        without a store_dir or remote, with stored_calibration=False, or when the store refused the write)."""

class EngineOptions:
    """The options an Engine was opened with."""
    @property
    def model(self) -> str: ...
    @property
    def store_dir(self) -> str: ...
    @property
    def pool_bytes(self) -> int: ...
    @property
    def page_size(self) -> int: ...
    @property
    def host_budget_bytes(self) -> int: ...
    @property
    def disk_budget_bytes(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def remote(self) -> str: ...
    @property
    def remote_ttl_seconds(self) -> int: ...
    @property
    def remote_max_held_fraction(self) -> float: ...
    @property
    def device(self) -> str:
        """'cpu', 'cuda' or 'cuda:N'."""
    @property
    def dtype(self) -> str:
        """'float32', 'bfloat16' or 'float16'."""
    @property
    def eviction(self) -> str:
        """'lru' or 'cost-aware'."""
    @property
    def cold_tier(self) -> str:
        """'exact' or 'int8'."""
    @property
    def device_tier_bytes(self) -> int: ...
    @property
    def embedding_cache(self) -> bool: ...
    @property
    def stored_calibration(self) -> bool:
        """The fidelity calibration read from and written to the store."""
    @property
    def window_past(self) -> bool:
        """Windows keep their KV as one contiguous past between reads (CPU engines)."""
    @property
    def max_idle_chunks(self) -> int:
        """Chunks kept registered beyond those in use (0 = all, for the engine's life)."""
    @property
    def max_background_bytes(self) -> int:
        """The KV queued background jobs may hold before the oldest are dropped (0 = no bound)."""
    @property
    def background(self) -> BackgroundMode: ...
    @property
    def tokenizer(self) -> str:
        """The tokenizer file given ('' = the one found beside the model; model_info.tokenizer is the one in use)."""
    @property
    def constraint_cache(self) -> ConstraintCacheOptions:
        """The bounds of the engine's cache of compiled constraints."""

class TokenLogprob:
    """One token's log probability at a step (Window.generate(logprobs=True))."""
    @property
    def token(self) -> int: ...
    @property
    def logprob(self) -> float: ...
    @property
    def bytes(self) -> bytes:
        """The bytes the token writes at its place (b'' for EOS/BOS/special tokens)."""

class StepLogprobs:
    """A generated token's log probability and its step's most likely tokens."""
    @property
    def chosen(self) -> TokenLogprob: ...
    @property
    def top(self) -> list[TokenLogprob]:
        """The top_logprobs most likely tokens, most likely first; where a constraint allows fewer, then the masked tokens most likely before the mask, at logprob -inf."""
    @property
    def token(self) -> int: ...
    @property
    def logprob(self) -> float: ...

class Generation:
    """The result of Window.generate()."""
    @property
    def tokens(self) -> list[int]:
        """Generated tokens (a stop token, and a stop string's tokens, included when they ended the run)."""
    @property
    def prompt_forward_tokens(self) -> int:
        """Query tokens forwarded: all, or only the last when exact reuse held the others."""
    @property
    def text(self) -> str:
        """The tokens as text ('' without a tokenizer); with stop_reason 'stop_string', up to the stop string.
        Bytes that are not UTF-8 (a character max_tokens cut) read as U+FFFD."""
    @property
    def stop_reason(self) -> str:
        """'stop_token', 'stop_string' (generate's stop; a token that is a stop token and completes a stop string
        gives 'stop_string', the cut that applies), 'max_tokens', 'position_limit', 'cancelled' (on_text
        returned False or raised, or a stream left early); with a constraint also 'constraint_complete' or
        'constraint_no_token'."""
    @property
    def seconds(self) -> float: ...
    @property
    def logprobs(self) -> list[StepLogprobs]:
        """With generate(logprobs=True): one StepLogprobs per generated token, else []."""
    # Set by Window.generate (tools, tool_choice, response_format):
    tool_calls: list[dict]
    """The calls read from the answer: [{'id', 'type': 'function', 'function': {'name', 'arguments'}}]. An answer
    max_tokens ended inside a call gives that call last, as far as it was written (tool_call_cut), as orbit
    serve answers it: a call cut inside its name, or before it began (after its mark; inside the '<tool_call>'
    mark too where the answer is calls from its first byte: 'required', a tool's name, or a call under 'auto'
    beside a JSON response_format), is the one tool it can still become (arguments ''), else left out; its
    markup is never content."""
    tool_call_cut: bool
    """The last of tool_calls was cut by max_tokens: its arguments are not valid JSON; do not run it."""
    content: str
    """The text that is not a call."""
    json: object
    """The answer parsed as JSON under a response_format, else None (also when the answer is a call)."""
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[int]: ...

class InstanceLoss:
    """One instance's own share of a window's fidelity loss (Window.loss_by_instance())."""
    @property
    def instance(self) -> int: ...
    @property
    def label(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def formed_by(self) -> StepAction: ...
    @property
    def match(self) -> PatchMatch: ...
    @property
    def context_changed(self) -> bool: ...
    @property
    def kv_change(self) -> float: ...
    @property
    def measured_kl(self) -> float: ...
    @property
    def predicted_kl(self) -> float: ...

class DisposabilityReport:
    """The result of Window.disposable()."""
    @property
    def instance(self) -> int: ...
    @property
    def disposable(self) -> bool: ...
    @property
    def answer(self) -> list[int]: ...
    @property
    def answer_without(self) -> list[int]: ...
    @property
    def kl_first(self) -> float: ...
    def __bool__(self) -> bool: ...

class InstanceKV:
    """An instance's stored KV, copied out of the pool."""
    @property
    def length(self) -> int: ...
    @property
    def k_shape(self) -> list[int]: ...
    @property
    def v_shape(self) -> list[int]: ...
    @property
    def k(self) -> numpy.typing.NDArray[numpy.float32]: ...
    @property
    def v(self) -> numpy.typing.NDArray[numpy.float32]: ...
    @property
    def pages(self) -> numpy.typing.NDArray[numpy.int32]: ...

class WindowPolicy:
    """What a window does on a patch miss, with survivors and with stale patches.

    Policy() and replace() raise ValueError for a field set to a value other than its default that the
    policy never reads (first_k without on_miss='first_k' or a kl_budget, recompute_ratio without
    'token_recompute' or a kl_budget, deep_energy without deep_only, stale='accept' without reuse_stored,
    max_divergence without stale='accept', heal_min_kl or self_check without heal_when_idle, prepare_lists
    without reuse_computed, trust_hints without prepare_moves or prepare_lists); a window given the policy (new_window, Window.policy) checks it the same way.
    on_miss, survivors and stale set to an enum built from an int that is none of its members (MissAction(7))
    raise ValueError naming the field, as an unknown name does. A float field takes a float, an int or a numpy
    number, a count or rank an int or a numpy integer; a bool or another type raises TypeError naming the field
    ("WindowPolicy.kl_budget: expected float, got bool"). rank= sets rank_k and rank_v together: beside either
    it raises ValueError."""
    def __init__(
        self,
        spec: Union[str, "WindowPolicy", None] = None,
        *,
        on_miss: Union[MissAction, str] = ...,
        survivors: Union[SurvivorAction, str] = ...,
        stale: Union[StalePatch, str] = ...,
        max_divergence: float = ...,
        rank: Union[SupportsIndex, str] = ...,
        rank_k: Union[SupportsIndex, str] = ...,
        rank_v: Union[SupportsIndex, str] = ...,
        deep_only: bool = ...,
        deep_energy: float = ...,
        reuse_stored: bool = ...,
        use_orbit_patches: bool = ...,
        cascade_on_recall: bool = ...,
        store_conditioned: bool = ...,
        reuse_computed: bool = ...,
        cost_aware: bool = ...,
        expected_reuse: float = ...,
        recompute_ratio: float = ...,
        first_k: SupportsIndex = ...,
        kl_budget: float = ...,
        defer_repairs: bool = ...,
        heal_when_idle: bool = ...,
        heal_min_kl: float = ...,
        self_check: bool = ...,
        prepare_recalls: SupportsIndex = ...,
        prepare_moves: SupportsIndex = ...,
        prepare_lists: SupportsIndex = ...,
        trust_hints: SupportsIndex = ...,
        read_through: float = ...,
        attention_weight: float = ...,
        content_weight: float = ...,
        read_attention_weight: float = ...,
        read_attention_raised_only: bool = ...,
    ) -> None: ...
    on_miss: MissAction
    survivors: SurvivorAction
    stale: StalePatch
    max_divergence: float
    rank_k: int
    rank_v: int
    deep_only: bool
    deep_energy: float
    reuse_stored: bool
    use_orbit_patches: bool
    cascade_on_recall: bool
    store_conditioned: bool
    reuse_computed: bool
    cost_aware: bool
    expected_reuse: float
    recompute_ratio: float
    first_k: int
    kl_budget: float
    defer_repairs: bool
    heal_when_idle: bool
    heal_min_kl: float
    self_check: bool
    prepare_recalls: int
    prepare_moves: int
    prepare_lists: int
    trust_hints: int
    read_through: float
    attention_weight: float
    content_weight: float
    read_attention_weight: float
    read_attention_raised_only: bool
    @property
    def name(self) -> str: ...
    def replace(self, **options: object) -> "WindowPolicy": ...
    def __copy__(self) -> "WindowPolicy": ...
    def __deepcopy__(self, memo: dict) -> "WindowPolicy": ...
    def __eq__(self, other: object) -> bool: ...

Policy = WindowPolicy

def parse_tool_calls(text: str, format: str = "hermes", *, cut: bool = False) -> dict:
    """{'content', 'tool_calls': [{'id', 'type': 'function', 'function': {'name', 'arguments'}}], 'malformed',
    'cut'}. With cut=True (a text max_tokens ended), a call the text ends inside is the last of 'tool_calls' as
    far as it was written (its arguments not valid JSON; 'cut' says so) rather than content."""
def generate_many(requests: Sequence[Union[tuple[Window, Tokens], tuple[Window, Tokens, dict]]], *,
                  cancel: Optional[CancelToken] = None) -> list[Generation]:
    """Decodes several windows together (one forward per step), each as Window.generate would alone (token for token
    on the CPU while a step's rows stay within 16; past them the products take BLAS, whose sums move by about 1e-6
    with the rows beside them, so a seeded sampled answer can change where a draw falls that close to a boundary,
    greedy ones at near-ties: docs/ARCHITECTURE.md, Greedy repeats); a request is
    (window, query) or (window, query, {generate() keyword arguments}: stop and cancel included, on_text not). At
    most 1024 requests (as generate_n's n): more raise OrbitError 'generate_many: requests: ...' before any is read.
    A window this thread is inside a call of (from that window's on_text, or a Window.stream loop on it) raises
    OrbitError rather than wait for itself. cancel: a token for the whole call -- cancel() stops every request at
    its next token (stop_reason 'cancelled'); a request's own options['cancel'] stops that request alone, the others
    decoding on. A request whose token was cancelled before the call answers a cancelled Generation (no tokens)
    without decoding; while the call waits for another thread's call on one of its windows, it gives up once
    every request's token is cancelled, each answering so. close() of a request's window stops that request the same
    way and returns once it stopped, not at the batch's end (each window is held until its own requests are
    answered); a window closed while the call waits for it answers its requests cancelled, one closed before the
    call raises OrbitError as generate() does. Engine.close() stops every request. Called on the main thread, it runs signal handlers while it decodes (at most 100 ms apart): one that
    raises (Ctrl-C's KeyboardInterrupt) stops every request at its next token and is raised here, the answers
    dropped (in the repairs its windows deferred, which run first, it stops them before an instance or between two
    layers of its forward, the window as before them); a call on one of its windows, or closing the engine, from a
    handler raises OrbitError instead of waiting for itself."""

def set_signal_interval(seconds: float) -> float:
    """How often a long call on Python's main thread (a decode, a window operation such as sync, add_turn,
    logits or idle, Engine.run_background) takes the GIL to run pending signal handlers, so Ctrl-C stops it: at
    most every `seconds` (default 0.1; 0: at every token or interruption point). Returns the previous value.
    TypeError naming seconds for a non-number (None, a str, a bool), ValueError outside [0, 3600]."""
    ...

class CancelToken:
    """Stops a decode from any thread: pass it as cancel= to Window.generate, Window.generate_n or
    orbit.generate_many (per request in its options, or for the whole call) and call cancel(). The decode reads
    it at each token without the GIL and ends with stop_reason 'cancelled', the Generation holding every token
    so far (no tokenizer needed). A call given a token already cancelled returns a cancelled Generation at once
    (no tokens, nothing forwarded, the window not locked; a closed window still raises OrbitError). So does a
    call waiting for another thread's call on its window when the token is cancelled meanwhile (within about
    20 ms), instead of waiting for that call to end. A token stays cancelled; one token may serve many calls. CancelToken(parent) reads as cancelled when it or an
    ancestor was cancelled; cancelling it leaves the parent alone (orbit.aio makes one per call this way)."""
    def __init__(self, parent: Optional["CancelToken"] = None) -> None:
        """A token not cancelled; parent: a CancelToken or None (else TypeError naming `parent`)."""
    def cancel(self) -> None:
        """Decodes given this token (or a child of it) stop at their next token. Any thread; idempotent."""
    @property
    def cancelled(self) -> bool:
        """True once cancel() was called on it or on an ancestor."""
def _close_engines_at_exit() -> None:
    """Internal: closes every Engine still open; orbit/__init__.py registers it with atexit, so decodes and
    run_background left on daemon threads return before the interpreter is torn down."""
    ...

def _check_stream_arguments(window: "Window", query: Tokens, kwargs: dict) -> None:
    """Internal to Window.stream: its arguments checked as generate() checks them, nothing decoded."""
class _StreamRoom:
    """Internal to Window.stream and orbit.aio: the gate a stream's decode waits at for its reader; cancelling its
    token (or an ancestor), closing its window or closing its engine stops it, waking a take() at once."""
    def __init__(self, ahead: SupportsIndex, token: CancelToken, window: "Window") -> None: ...
    def take(self, timeout_s: float) -> bool:
        """Waits (without the GIL) for a piece's room and takes it: True; True at once, taking nothing, once
        stopped; False when timeout_s passed first. Arguments are read as the public API's (numpy numbers taken,
        bools refused, TypeError / ValueError naming the argument)."""
    def give(self, n: SupportsIndex = 1) -> None: ...
    @property
    def stopped(self) -> bool: ...
    def hold_reader(self) -> None:
        """Registers the calling thread (the loop's; for orbit.aio the event loop's) as the stream's reader until
        release_reader(): the window's
        calls made on it raise OrbitError at once instead of waiting for the decode. Raises OrbitError when this
        thread reads another stream on the window already."""
    def release_reader(self) -> None:
        """Undoes hold_reader() (call it once the loop ended and its decode returned); idempotent, from any
        thread."""

def policy_help() -> str:
    """The valid policy spec forms, one per line."""

class Engine:
    """One model, one KV pool, one chunk store. A context manager."""
    def __init__(
        self,
        model: Union[str, os.PathLike],
        *,
        store_dir: Union[str, os.PathLike, None] = None,
        pool_bytes: SupportsIndex = 268435456,
        page_size: SupportsIndex = 16,
        host_budget_bytes: SupportsIndex = 1073741824,
        disk_budget_bytes: SupportsIndex = 0,
        threads: SupportsIndex = 0,
        remote: str = "",
        remote_ttl_seconds: SupportsIndex = 0,
        remote_secret: str = "",
        remote_max_held_fraction: float = 0.5,
        device: str = "cpu",
        dtype: str = "float32",
        eviction: str = "lru",
        cold_tier: str = "exact",
        device_tier_bytes: SupportsIndex = 0,
        embedding_cache: bool = True,
        background: Union[str, BackgroundMode] = "thread",
        shared_canonicals: bool = True,
        max_idle_chunks: SupportsIndex = 0,
        max_background_bytes: SupportsIndex = 0,
        constraint_cache: Optional[ConstraintCacheOptions] = None,
        tokenizer: Union[str, os.PathLike, None] = None,
        stored_calibration: bool = True,
        window_past: bool = True,
    ) -> None:
        """disk_budget_bytes > 0 needs store_dir; remote_ttl_seconds > 0 and remote_secret need remote (OrbitError
        otherwise). remote_secret: the remote tier's shared secret ('' = ORBIT_REMOTE_SECRET, else none: values are
        checked but not authenticated, and opening warns once). A remote that does not answer a PING at open
        (nothing on the port, a wrong password, TLS, a timeout) issues a RemoteUnreachableWarning naming the URL
        (password redacted) and the cause; the engine still opens, on its local tiers.
        remote_max_held_fraction: the share (0..1) of the disk budget that entries kept for their undelivered remote
        writes may fill; past it the oldest are evicted and their writes given up (stats().store.remote.abandoned,
        one warning a run); 1 = keep every one (puts needing their room are refused), 0 = none; another value than
        0.5 needs remote, store_dir and disk_budget_bytes > 0 (OrbitError naming it).
        tokenizer, store_dir, device, dtype, eviction and cold_tier given as '' raise ValueError naming them (leave
        one out for its default).
        device: 'cpu', 'cuda' or 'cuda:N' (OrbitError where there is no CUDA device); dtype: 'float32',
        'bfloat16' or 'float16' (float16 on CUDA only): weights load straight into it, KV and windows live there.
        eviction: the store's policy, 'lru' or 'cost-aware'; cold_tier: 'exact' or 'int8' canonicals on disk;
        device_tier_bytes: a device tier of canonicals in GPU memory (0 = none; CUDA engines only);
        embedding_cache: keep media embeddings (added with a media_digest) for find_media().
        background: 'thread', 'deferred' (formed only in run_background()) or 'inline'. Under 'thread' what a
        window's next plan finds formed depends on timing, so approximate plans (and greedy answers over them) can
        differ from run to run; 'inline', or 'deferred' with run_background() at fixed points, repeats a run.
        shared_canonicals: windows placing the same chunk read its canonical pages in place, each adding its
        own patch factors (stats().pool_canonical_pages, pool_patch_bytes); False: a patched copy each.
        max_idle_chunks: 0 keeps every chunk registered for the engine's life; N keeps the N most recently added
        or used and forgets one past them once no window holds it (its ChunkRef then raises OrbitError until
        it is added again).
        max_background_bytes: the KV queued background jobs may hold (0 = no bound); past it the oldest queued
        jobs are dropped and their patches not formed (stats().background_dropped): for background='deferred'
        work that may not find idle time for long.
        constraint_cache: the bounds of the compiled constraints generate keeps for tools and response_format
        (None = ConstraintCacheOptions(): 64 entries, 256 MiB; TypeError for anything else).
        tokenizer: the tokenizer file for text: llama2.c's (tok512.bin, tokenizer.bin) or a tokenizer.json (or a
        directory holding one); None = the model directory's tokenizer.json, else tok<vocab>.bin / tokenizer.bin
        beside a llama2.c model, if any (model_info.tokenizer names the one in use). A missing or unreadable file
        raises OrbitError naming the keyword and the path ("Engine: tokenizer = ...").
        stored_calibration: with a store_dir or remote, calibrate() / calibrate_fidelity() write the deficits they
        measured there (to both when both are given), and an engine opening this model (same fingerprint, so same
        dtype) on that store directory or remote fits its fidelity model from them without measuring
        (fidelity_calibration() says 'store', or 'remote' for the remote's): the directory's is read at open, the
        remote's (when the directory holds none) at the first plan or fidelity question, never at open, and again
        at a later one while the remote does not answer. An entry that does not decode is ignored with a warning
        on stderr naming its key and the defaults kept. False: neither read nor written.
        window_past: each window of a CPU engine keeps its KV as one contiguous past between its reads (a forward
        behind it, a decode's first step, logits), so a read after a short append copies what was appended instead
        of the whole window (equal bit for bit); it costs up to twice the window's KV bytes (64 rows' at least) of
        host memory per window, fitted again when the window shrinks (Window.stats.past_bytes). False: every read
        copies the whole window. Unused on CUDA, whose reads read the pool's pages in place.
        background given as a BackgroundMode that is not one of its members (BackgroundMode(7)) raises ValueError.
        A keyword not listed here, or a value of another type than the one above (a float for an int, bytes for a
        str, an int past the field's range; for a bool anything but True, False or a numpy bool: None, 0/1, a
        str), raises TypeError naming the keyword ("Engine: embedding_cache: expected bool, got float")."""
    def __enter__(self) -> "Engine":
        """The engine; OrbitError ("with engine: the engine is closed ...") once it is closed."""
    def __exit__(self, *args: object) -> bool: ...
    def close(self, finish_seconds: Optional[float] = None) -> None:
        """Finishes the background work queued so far (canonicals and patches of first sights, for the store
        directory or remote to keep; without either none is run), then flushes and closes the store, once the
        calls in flight on other threads returned (the KV pool and the weights are freed with the last reference
        to the engine or one of its windows). finish_seconds (None: no bound) bounds
        that work; what is left then is dropped (formed again when a later run needs it), as it is when Ctrl-C
        comes meanwhile (the engine is closed, then KeyboardInterrupt raised). finish_seconds is a float or an int
        (TypeError for a bool or another type); a negative or NaN one raises OrbitError. A close() called while
        another thread's runs waits for it, under the first one's finish_seconds.
        A decode running on any of its windows (generate, generate_n, generate_many, a Window.stream, an
        orbit.aio call) is first stopped at its next token, stop_reason 'cancelled' as a CancelToken gives, so
        close() waits for that token, not for the whole answer (a stream waiting for its reader is woken at
        once); one asked for meanwhile raises OrbitError('Window.generate: engine is closed'), and none runs
        once close() returned. Idempotent. Later calls on the engine or its windows raise OrbitError naming
        the call ('tokenize: engine is closed', 'Window.sync: engine is closed'), the tokenizer's (tokenize,
        detokenize, piece, has_tokenizer) and options included; only closed, stats,
        fidelity_model_description(), fidelity_calibration() and repr() answer.
        Called from inside a call of this engine on the same thread (generate's on_text) it raises OrbitError
        instead of waiting for that call, which waits for it, and stops nothing."""
    @property
    def closed(self) -> bool:
        """True once close() was called (a lock-free read; close() may still be stopping decodes)."""
    @property
    def options(self) -> EngineOptions: ...
    @property
    def model_info(self) -> ModelInfo: ...
    @property
    def stats(self) -> EngineStats:
        """The engine's counters. Unlike every other call it answers after close() too, so the final counts can
        be read once the engine is closed: the counters as close() left them, and `store` empty (no tiers, zero
        counts: the store is closed and has nothing to report)."""
    def run_background(self, max_seconds: float = 1e30) -> int:
        """Runs queued background work here until none is left or max_seconds passed; returns the jobs run. On the
        main thread Ctrl-C stops it before a job or inside a job's forward (KeyboardInterrupt), no job lost: the
        rest stay queued."""
    def calibrate(self) -> CalibrationReport:
        """Fits the planner's cost model on this machine (timed forwards, relocation, patches, tier reads) and its
        fidelity model (deficits measured as next-token KL against a re-prefill): plans' estimated_seconds and
        predicted_kl follow. About a second on the bundled model. OrbitError for a closed engine."""
    def calibrate_fidelity(
        self, *, progress: Optional[Callable[[int, int], object]] = None
    ) -> CalibrationReport:
        """Fits only the fidelity model, as calibrate() does (plans' predicted_kl, `:kl=X` budgets), and leaves the
        cost model as it is: estimated_seconds do not change, the report's samples is 0 and cost_model ''.
        Nothing is timed and the samples are seeded: two engines of one model fit the same model. Both
        calibrations move the model halfway from the defaults (stories260K's fit) toward this model's fit, in log
        space. With a store_dir or remote (and stored_calibration) the deficits are kept in the store
        (report.stored). progress(seeds_done, seeds) is called after each seed is measured (the GIL held for it;
        an exception it raises, or Ctrl-C, stops the calibration, nothing fitted or stored, and propagates).
        OrbitError for a closed engine."""
    def fidelity_model_description(self) -> str:
        """The fidelity model plans predict with now, one line: each loss kind's coefficient (KL per unit of loss)
        marked fitted or default, the reference sensitivity s_ref, and ', correction xF' once the self-checks
        scaled it (stats.fidelity_correction). Answers after close() too."""
    def fidelity_calibration(self) -> Literal["default", "store", "remote", "calibrated"]:
        """Where that model comes from: 'default' (never calibrated, or no stored calibration read yet), 'store'
        (fitted from the calibration the store directory holds for this model), 'remote' (fitted from the remote's,
        asked by the first plan or call of this or fidelity_model_description() when the directory holds none;
        again at a later one while the remote does not answer) or 'calibrated' (calibrate() / calibrate_fidelity()
        ran on this engine). Answers after close() too."""
    def add_tokens(self, tokens: Union[Tokens, str], *, label: str = "", pin: bool = False) -> ChunkRef: ...
    # Text: the model's tokenizer (a llama2.c tokenizer.bin beside the model, a Hugging Face directory's
    # tokenizer.json) or Engine(tokenizer=...)'s; has_tokenizer False where there is none (the text calls raise).
    # A str wherever token ids go is tokenized without BOS.
    @property
    def has_tokenizer(self) -> bool: ...
    def tokenize(self, text: str, bos: bool = True) -> list[int]: ...
    def detokenize(self, tokens: Tokens, previous: SupportsIndex = -1) -> str: ...
    def piece(self, token: SupportsIndex) -> str: ...
    def add_text(self, text: str, *, label: str = "", pin: bool = False, bos: bool = False) -> ChunkRef: ...
    # Messages (orbit/sync.h): the model's chat template (tokenizer_config.json), else chat_template=, else
    # the built-in plain one. tools and extra given as str must be JSON text of a list and of an object: else
    # ValueError naming the function and the argument ("sync: extra is not valid JSON: ..."); a value of another
    # type (extra not a dict, tools not a list or tuple, chat_template not a str) raises TypeError the same way.
    @property
    def has_chat_template(self) -> bool: ...
    def tool_call_format(self, *, chat_template: Optional[str] = None) -> str:
        """'hermes', 'llama3' or 'mistral': how the chat template in use writes tool calls."""
    def render_chat(
        self,
        messages: Messages,
        add_generation_prompt: bool = True,
        *,
        chat_template: Optional[str] = None,
        tools: Union[Sequence[dict], str, None] = None,
        extra: Union[dict, str, None] = None,
    ) -> str:
        """The messages rendered as transformers' apply_chat_template renders them."""
    def tokenize_chat(
        self,
        messages: Messages,
        add_generation_prompt: bool = True,
        *,
        chat_template: Optional[str] = None,
        tools: Union[Sequence[dict], str, None] = None,
        extra: Union[dict, str, None] = None,
    ) -> list[int]:
        """tokenize(render_chat(...)) with no special tokens added: what Window.sync puts in a window."""
    def add_embeddings(
        self,
        embeddings: Union[numpy.ndarray, "torch.Tensor", Sequence[Sequence[float]]],  # noqa: F821
        *,
        grid: Optional[Grid] = None,
        media_digest: str = "",
        label: str = "",
        pin: bool = False,
    ) -> ChunkRef: ...
    def find_media(
        self,
        media_digest: str,
        *,
        grid: Optional[Grid] = None,
        rows: SupportsIndex = 0,
        label: str = "",
        pin: bool = False,
    ) -> Optional[ChunkRef]:
        """The media chunk an add_embeddings with this digest and grid registered: this engine's own, else the one
        whose embeddings the store holds (None: encode it and call add_embeddings)."""
    def chunk(self, key: str) -> ChunkRef: ...
    @property
    def chunks(self) -> list[ChunkRef]: ...
    def precompute(self, chunk: ChunkArg) -> None: ...
    def new_window(
        self, *, policy: Optional[PolicyArg] = None, max_bytes: SupportsIndex = 0, label: str = ""
    ) -> "Window": ...

class Window:
    """An ordered set of chunk instances plus live turns. Plan, then apply."""
    def close(self) -> None:
        """Destroys the window (pages back to the pool); idempotent; later calls raise OrbitError. A call running
        on it on another thread is waited for, but a decode (generate, generate_n, its generate_many requests, a
        Window.stream -- e.g. closed from the stream's loop) first stops at its next token, stop_reason
        'cancelled', so close() waits for one token, not for the whole answer nor, in generate_many, for the other
        windows' answers (a stream's decode waiting for its reader is woken at once). Engine.close() stops them the
        same way."""
    @property
    def closed(self) -> bool:
        """True once close() was called on it or on its engine (a lock-free read, safe while another thread closes
        either): every call but close() then raises OrbitError."""
    def __enter__(self) -> "Window":
        """The window; OrbitError ("with window: window N is closed ...") when it or its engine is closed."""
    def __exit__(self, *args: object) -> bool: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def id(self) -> int: ...
    @property
    def label(self) -> str: ...
    @property
    def max_bytes(self) -> int: ...
    @property
    def policy(self) -> WindowPolicy: ...
    @policy.setter
    def policy(self, value: PolicyArg) -> None: ...
    @property
    def instances(self) -> list[InstanceInfo]: ...
    def instance(self, id: InstanceArg) -> Optional[InstanceInfo]: ...
    @property
    def tokens(self) -> int: ...
    @property
    def evicted(self) -> list[ChunkRef]: ...
    @property
    def stats(self) -> WindowStats: ...
    @property
    def version(self) -> int: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[InstanceInfo]: ...
    def __contains__(self, item: Union[ChunkArg, InstanceArg], /) -> bool:
        """`chunk in window`: a ChunkRef or a chunk key (str) placed here (an unknown key is not); or `instance in
        window`: an instance id (int) or InstanceInfo it holds. TypeError for anything else."""
    # planning (nothing changes)
    def plan_admit(self, chunk: ChunkArg, *, before: Optional[InstanceArg] = None) -> Plan: ...
    def plan_add_turn(self, tokens: Tokens) -> Plan: ...
    def plan_evict(self, instance: InstanceArg) -> Plan: ...
    def plan_slide(self, chunks: SupportsIndex = 1) -> Plan: ...
    def plan_recall(self, chunk: ChunkArg, *, before: Optional[InstanceArg] = None) -> Plan: ...
    def plan_reorder(self, order: Sequence[InstanceArg]) -> Plan: ...
    def plan_place(self) -> Plan: ...
    def plan_recondition(self) -> Plan: ...
    def plan_flush(self) -> Plan: ...
    def plan_heal(self) -> Plan: ...
    # applying
    def apply(self, plan: Plan) -> ApplyReport: ...
    def admit(self, chunk: ChunkArg, *, before: Optional[InstanceArg] = None) -> ApplyReport: ...
    def add_turn(self, tokens: Tokens) -> ApplyReport: ...
    def evict(self, instance: InstanceArg) -> ApplyReport: ...
    def slide(self, chunks: SupportsIndex = 1) -> ApplyReport: ...
    def recall(self, chunk: ChunkArg, *, before: Optional[InstanceArg] = None) -> ApplyReport: ...
    def reorder(self, order: Sequence[InstanceArg]) -> ApplyReport: ...
    def place(self) -> ApplyReport: ...
    def recondition(self) -> ApplyReport: ...
    def flush(self) -> ApplyReport: ...
    def heal(self) -> ApplyReport: ...
    def prepare_recalls(self, max_chunks: SupportsIndex = 1) -> IdleReport: ...
    def prepare_moves(self, max_chunks: SupportsIndex = 8) -> IdleReport: ...
    def prepare_evictions(self, instances: Sequence[InstanceArg]) -> IdleReport: ...
    def idle(self) -> IdleReport: ...
    def fork(self) -> "Window": ...
    # messages (orbit/sync.h)
    def sync(
        self,
        messages: Messages,
        *,
        chunk_min_tokens: SupportsIndex = 64,
        chat_template: Optional[str] = None,
        tools: Union[Sequence[dict], str, None] = None,
        extra: Union[dict, str, None] = None,
    ) -> "SyncReport":
        """Brings the window to the chat-template rendering of messages; pass report.generation_prompt to
        generate() for the next assistant turn. messages must be a list (any iterable) of dicts, else TypeError
        naming messages; each entry of tools must be a dict (TypeError naming tools[i]). A sync the KV pool or the
        window's max_bytes cannot hold raises CapacityError (status 'out_of_capacity'), the window unchanged."""
    def plan_sync(
        self,
        messages: Messages,
        *,
        chunk_min_tokens: SupportsIndex = 64,
        chat_template: Optional[str] = None,
        tools: Union[Sequence[dict], str, None] = None,
        extra: Union[dict, str, None] = None,
    ) -> "SyncPlan":
        """What sync() would do; nothing changes."""
    def prepare_sync(
        self,
        messages: Messages,
        *,
        chunk_min_tokens: SupportsIndex = 64,
        chat_template: Optional[str] = None,
        tools: Union[Sequence[dict], str, None] = None,
        extra: Union[dict, str, None] = None,
    ) -> IdleReport:
        """In idle time, computes the list the agent expects to sync next exactly (a throwaway fork, the KV
        stored for exact reuse), so a later sync whose list starts the same way serves it with no forward.
        While the window trusts the agent's hints (Policy.trust_hints), the learned lists and moves that are
        this list and one message more are prepared too: only that message is forwarded."""
    # reading (nothing stored)
    def logits(self, query: Tokens, *, all_rows: bool = False) -> numpy.typing.NDArray[numpy.float32]:
        """[vocab] for the last query token, [len(query), vocab] with all_rows=True; all_rows other than
        True, False or a numpy bool (None, 0/1) raises TypeError naming it (it is not read as a bool)."""
    def reference_logits(self, query: Tokens, *, all_rows: bool = False) -> numpy.typing.NDArray[numpy.float32]:
        """What a re-prefill of the window would give, shaped as logits(); all_rows not a bool raises TypeError."""
    def generate(
        self,
        query: Tokens,
        *,
        max_tokens: SupportsIndex = 32,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: SupportsIndex = 0,
        stop_tokens: Optional[Tokens] = None,
        stop: Union[str, Sequence[str], None] = None,
        on_text: Optional[Callable[[str], Optional[bool]]] = None,
        tools: Union[Sequence[dict], str, None] = None,
        tool_choice: Union[str, dict, None] = "auto",
        response_format: Union[str, dict, None] = None,
        tool_call_format: Optional[str] = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        logit_bias: Optional[dict[Union[int, str], float]] = None,
        logprobs: bool = False,
        top_logprobs: SupportsIndex = 0,
        constraint_trigger_block: Optional[tuple[str, str]] = None,
        cancel: Optional[CancelToken] = None,
        ignore_eos: bool = False,
    ) -> Generation:
        """Decodes after the query; seed is an int in [0, 2**64) (another type raises TypeError, an int out of
        that range ValueError, each naming seed); with tools / tool_choice / response_format the answer is decoded under a
        constraint and read back into tool_calls, content and json. presence_penalty / frequency_penalty
        ([-2, 2]) and logit_bias ({token: [-100, 100]}) act as OpenAI's; temperature (>= 0), top_p ([0, 1]; 0: the top token alone) and the
        penalties are floats (an int or a numpy float too; None, a str or a bool raise TypeError naming the argument,
        a value out of range OrbitError naming it); logprobs (a bool: None or another type raises
        TypeError naming it, here and in generate_n / generate_many's options) / top_logprobs (0..20) fill
        Generation.logprobs (after those and the constraint, at temperature 1). An answer asked for (a forced
        call, a response_format) that the model's vocabulary cannot spell raises OrbitError naming the byte
        before anything runs (orbit::unwritable); under tool_choice "auto" such tools leave the answer free.
        tool_choice: 'auto' (None too), 'none', 'required', a tool's name, or OpenAI's {'type': 'function',
        'function': {'name': ...}} (another type raises TypeError; a malformed dict, a name not among the tools, or
        a choice other than 'auto' / 'none', or a tool_call_format, without tools ValueError); response_format: 'text', 'json_object', OpenAI's {'type': 'json_schema',
        'json_schema': {'name': ..., 'schema': {...}}} or a JSON Schema dict.
        Arguments that would change nothing raise ValueError naming them: top_p other than 1 or seed other than 0
        at temperature 0 (greedy decoding samples nothing), a tool_call_format under tool_choice 'none' (no call
        is read), a response_format other than 'text' with a forced call ('required' or a name: the answer is
        the call).
        tools: a list (or its JSON text) of OpenAI's {'type': 'function', 'function': {'name': ..., 'parameters':
        ...}} or the function dicts alone; whatever tool_choice is, an entry that is no dict raises TypeError and
        one without a non-empty str name ValueError, naming it (generate: tools[i]...); under 'auto' a schema
        outside the constraints' subset only leaves the answer free.
        What the answer is decoded under is compiled once per engine and arguments and kept in the engine's
        constraint cache (EngineStats.constraint_cache: at most 64 entries and 256 MiB, grammars and token masks
        counted, least recently used dropped first; a refusal is not kept), so a loop that sends the same tools
        or schema every step pays for it, and for its token masks, once (zod's hostname pattern alone takes
        over 100 ms to compile). The same schema written with other key order is another entry. tool_call_format
        ('hermes', 'llama3', 'mistral'; default: the chat template's) needs tools. An answer max_tokens ends
        inside a call gives that call last in tool_calls as far as it was written (Generation.tool_call_cut);
        one cut inside or before its name (a forced call's inside its mark too, e.g. text '<tool_cal') is the one
        tool it can still become (arguments ''), else left out, and content ''. max_tokens=0 decodes nothing and
        gives no call.

        stop_tokens: token ids that end the run after they are emitted (stop_reason 'stop_token', the token kept in
        tokens). The tokenizer's end tokens -- its EOS, and its BOS, with which a llama2.c model begins its next
        story -- end it the same way, as `orbit generate` and `orbit serve` stop, unless ignore_eos=True (a bool,
        else TypeError naming it; vLLM's ignore_eos: the run goes on to max_tokens, e.g. to time a fixed length).
        Under a constraint the EOS still ends an answer whose text is complete. An engine without a tokenizer
        knows no end tokens.

        stop: OpenAI's -- a str or a list of up to 4 non-empty str (else ValueError, TypeError for a wrong
        type, naming `stop`). The run ends at the token whose text completes one; Generation.text ends right
        before the first occurrence (the stop string left out), stop_reason 'stop_string'; tokens and logprobs
        keep every token chosen, the stop string's included. Under a constraint (a forced call, a
        response_format, a call started under tool_choice 'auto') a stop string ends the answer only where the
        text before it is complete, so it never cuts a call or a JSON answer short.

        on_text(piece): called with each piece of the answer's text as it becomes final -- whole characters that
        no stop string can take back any more, never '' -- so the pieces of a run that was not cancelled join to
        Generation.text (the last may end in U+FFFD when max_tokens cut a character). It runs on this thread
        with the GIL taken; the forward passes run without it. Returning False (any falsy value but None)
        cancels: stop_reason 'cancelled', the Generation holds every token decoded so far (its text may hold a
        held-back tail no piece carried). An exception it raises cancels the run too and is raised here once the
        decode has stopped; the window is left as after any generate. It must not use this window, nor close
        the engine (either raises OrbitError rather than wait for the call it runs in); other windows and the
        engine's other calls may be used.
        With tools the pieces are the raw answer as the model writes it, call markup included (Hermes:
        "<tool_call>{...}</tool_call>"), as `orbit serve` streams content before reading calls; tool_calls,
        content and json are read from the whole text at the end. Window.stream wraps this as an iterator.

        cancel: an orbit.CancelToken (else TypeError naming `cancel`); its cancel(), from any thread, ends the run
        at its next token with stop_reason 'cancelled' (read without the GIL, no tokenizer needed). A token
        cancelled before the call returns a cancelled Generation at once (no tokens, nothing forwarded), its
        arguments checked as for a run (a bad one raises all the same, orbit::check_generate in C++); so does one
        cancelled while the call waits for another thread's call on this window. close() of this window from
        another thread stops the run the same way (OrbitError 'window N is closed' while still waiting). On the
        main thread the decode runs signal handlers while it runs, and while it waits for the window (at most
        100 ms apart): one that raises (Ctrl-C's KeyboardInterrupt) stops the run
        at its next token and is raised here, the answer dropped (generate_n and generate_many the same). As
        on_text, a handler must not use this window nor close the engine (OrbitError, raised here).

        constraint_trigger_block: (open, close), e.g. ("<think>", "</think>"): a reasoning model's block at the
        answer's start, free text the constraint (tools, response_format) does not apply in. open "" means the
        text begins inside it (the prompt opened it); otherwise the block is there only where the text begins,
        whitespace aside, with open, which the model may write or not (it may also answer at once). The
        constraint applies right after close; under tool_choice "auto" a call's mark counts only there. None
        (the default): no block. Not a pair of str raises TypeError, an empty close or no constraint (neither
        tools nor response_format) ValueError, each naming constraint_trigger_block; tools under "auto" whose
        grammar cannot be had leave the whole answer free, the block's text with it."""
    def stream(self, query: Tokens, **kwargs) -> GenerationStream:
        """The answer's text piece by piece: a GenerationStream (see it) over generate(on_text=...), decoded on a
        worker thread, taking generate()'s keyword arguments but on_text (stop included)::

            s = window.stream(prompt, max_tokens=200, stop=["\\n\\n"])
            for piece in s:
                print(piece, end="", flush=True)      # break: the decode is cancelled, the window free at once
            print(s.generation.stop_reason)           # the Generation, once the loop ended

        The decode holds the window until the loop ends: a call on it from the loop's body (add_turn, generate,
        fork, instances, another stream, orbit.generate_many with it) raises OrbitError at once naming the call;
        make it after the loop. close() in the loop stops the stream instead; repr(window) there answers
        'Window(id=N, streaming)'. The arguments are checked here, as generate() checks them: a bad one (a query
        of None, seed=-1, top_p=2, an unknown keyword...) raises at this call, naming it, not at the first piece.
        """
    def generate_n(self, query: Tokens, n: SupportsIndex, **kwargs) -> list[Generation]:
        """n answers to one query decoded together through n - 1 copy-on-write forks (one query forward, answer i
        sampled with seed + i * 2**32, so that seeds s and s + 1 share no answer; with n above 16 an answer can differ
        from its fork decoded alone where a draw falls within about 1e-6 of a boundary, as generate_many says); takes generate()'s keyword arguments (stop included) but on_text. One
        cancel= token stops all n answers at their next token (stop_reason 'cancelled'); one cancelled before the
        call gives n cancelled Generations at once; on the main thread Ctrl-C stops them too (KeyboardInterrupt
        raised here, see generate). n must be in [1, 1024] (OrbitError naming n otherwise): every branch is forked
        before the first step."""
    def disposable(
        self, instance: InstanceArg, query: Tokens, *, answer_tokens: SupportsIndex = 4
    ) -> DisposabilityReport:
        """Greedy-decodes answer_tokens after the query with the instance as it is and with its conditioning
        switched off; truthy when the answers agree. answer_tokens past the model's positions (after the
        window and the query) raises OrbitError naming it, before anything runs."""
    def loss_by_instance(self, query: Tokens) -> list[InstanceLoss]: ...
    def kv(self, instance: InstanceArg) -> InstanceKV: ...

# ---- messages (orbit/sync.h) --------------------------------------------------------------------------------

class SyncAction(_Enum):
    """What Window.sync does with one unit of the rendered messages."""
    keep: "SyncAction"
    admit: "SyncAction"
    recall: "SyncAction"
    turn: "SyncAction"

class SyncUnit:
    """One unit of the rendering: messages [first_message, end_message) and their tokens."""
    @property
    def first_message(self) -> int: ...
    @property
    def end_message(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def key(self) -> str: ...
    @property
    def chunk(self) -> Optional[ChunkRef]: ...
    @property
    def part(self) -> int: ...
    @property
    def is_turn(self) -> bool: ...
    @property
    def action(self) -> SyncAction: ...
    @property
    def moved(self) -> bool: ...
    @property
    def instance(self) -> int: ...

class SyncPlan:
    """What Window.sync will do (Window.plan_sync), or did (SyncReport.plan)."""
    @property
    def units(self) -> list[SyncUnit]: ...
    @property
    def evict(self) -> list[int]: ...
    @property
    def reorder(self) -> bool: ...
    @property
    def tokens(self) -> list[int]: ...
    @property
    def generation_prompt(self) -> list[int]: ...
    @property
    def generation_prompt_exact(self) -> bool: ...
    @property
    def merged_boundaries(self) -> int: ...
    @property
    def chat_template(self) -> str: ...
    def count(self, action: SyncAction) -> int: ...
    def changes(self) -> bool: ...
    def describe(self) -> str: ...

class SyncReport:
    """What Window.sync did: its plan, the window operations and their reports. A sync that changes nothing
    runs no operation (plans is empty), yet the window keeps the loss its approximate instances carry. Right
    after a sync, whatever it did, Window.plan_flush().predicted_kl is the fidelity model's prediction for the
    window as its next read serves it, the repairs the sync deferred included (what orbit serve reports as
    usage.orbit.predicted_kl). Planned later, a flush may re-form instances (once background work makes that
    cheap) and predict for the window after it, which no read runs by itself."""
    @property
    def plan(self) -> SyncPlan: ...
    @property
    def plans(self) -> list[Plan]: ...
    @property
    def reports(self) -> list[ApplyReport]: ...
    @property
    def forward_tokens(self) -> float:
        """Critical-path token-forwards of the sync itself. Under a policy that defers repairs (every one but
        ':eager'), what its edits leave to repair (the messages behind an evicted one) runs at the next read
        (logits, generate) and is counted there; until then its plans' predicted_kl and exact describe the window
        as the edits left it."""
    @property
    def generation_prompt(self) -> list[int]: ...

class SyncMemoLimits:
    """The bounds of Window.sync's two process-wide memos (sync_memo_limits())."""
    @property
    def max_entries(self) -> int:
        """Message lists each memo keeps at most."""
    @property
    def max_bytes(self) -> int:
        """Bytes each memo's lists hold at most."""

def set_sync_memo_limits(*, max_entries: Optional[SupportsIndex] = None,
                         max_bytes: Optional[SupportsIndex] = None) -> None:
    """Bounds Window.sync's two memos (orbit/sync_memo.h): the renders of each synced message list's prefixes and
    the tokens of its text segments, kept for the lists that follow it. Both are process-wide (every engine and
    window shares them), least recently used dropped first, and hold one entry per new list. max_entries: lists
    each memo keeps at most, in [1, 1048576] (default 4096); max_bytes: bytes each memo's lists hold at most, in
    [1024, 2**40] (default 64 MiB). A keyword left out (None) keeps the bound in force; lists past the new bounds
    are dropped at once. A smaller memo changes no result, only the time a sync takes. A bool or another type
    raises TypeError, a value out of range OrbitError, naming the keyword; nothing changes then."""
def sync_memo_limits() -> SyncMemoLimits:
    """The bounds in force (4096 lists, 64 MiB until set_sync_memo_limits changes them)."""

# ---- offline store inspection (no model needed) ----------------------------------------------------------

class EntryKind(_Enum):
    """What a store entry holds."""
    canonical: "EntryKind"
    patch: "EntryKind"
    embedding: "EntryKind"
    other: "EntryKind"

class BlobEncoding(_Enum):
    """How a disk blob stores floating tensors."""
    exact: "BlobEncoding"
    int8: "BlobEncoding"

class StoreEntryInfo:
    """One committed store entry."""
    @property
    def key(self) -> str: ...
    @property
    def kind(self) -> EntryKind: ...
    @property
    def encoding(self) -> BlobEncoding: ...
    @property
    def value_bytes(self) -> int: ...
    @property
    def blob_bytes(self) -> int: ...
    @property
    def blob_path(self) -> str: ...
    @property
    def checksum(self) -> str: ...
    @property
    def pinned(self) -> bool: ...
    @property
    def marked_corrupt(self) -> bool: ...
    @property
    def hits(self) -> int: ...

class StoreSummary:
    """A store directory at a glance."""
    @property
    def dir(self) -> str: ...
    @property
    def model_fingerprint(self) -> str: ...
    @property
    def format_version(self) -> int: ...
    @property
    def entries(self) -> int: ...
    @property
    def value_bytes(self) -> int: ...
    @property
    def blob_bytes(self) -> int: ...
    @property
    def pinned(self) -> int: ...
    @property
    def marked_corrupt(self) -> int: ...
    @property
    def entries_by_kind(self) -> dict[str, int]: ...
    @property
    def bytes_by_kind(self) -> dict[str, int]: ...
    @property
    def unreferenced_blobs(self) -> int: ...
    @property
    def temp_files(self) -> int: ...
    @property
    def unreadable_dirs(self) -> list[str]:
        """Directories under blobs/ that could not be listed ('<path>: <reason>'): what they hold is not counted."""
    @property
    def remote_pending(self) -> dict[str, int]: ...
    @property
    def remote_abandoned(self) -> dict[str, int]: ...

class VerifyProblem:
    """A corrupt or missing blob, or one that could not be read."""
    @property
    def key(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def reason(self) -> str: ...

class VerifyReport:
    """What store_verify() found."""
    @property
    def checked(self) -> int: ...
    @property
    def problems(self) -> list[VerifyProblem]:
        """Corrupt or missing blobs."""
    @property
    def unreadable(self) -> list[VerifyProblem]:
        """Blobs that could not be read for a reason that proves nothing about them (EACCES, EIO, EISDIR, out of
        descriptors): not checked, not called bad; verify again (`orbit store verify`'s UNREADABLE lines)."""
    @property
    def unreferenced_blobs(self) -> int: ...
    @property
    def temp_files(self) -> int: ...
    @property
    def unreadable_dirs(self) -> list[str]:
        """Directories under blobs/ that could not be listed ('<path>: <reason>'): not counted; not clean."""
    @property
    def index_damage(self) -> str:
        """Why SQLite's integrity_check finds index.sqlite inconsistent, or '' (store_repair() reindexes it)."""
    @property
    def clean(self) -> bool: ...
    def __bool__(self) -> bool: ...

class GcReport:
    """What store_gc() removed."""
    @property
    def removed_blobs(self) -> int: ...
    @property
    def removed_temps(self) -> int: ...
    @property
    def freed_bytes(self) -> int: ...
    @property
    def removed_paths(self) -> list[str]: ...
    @property
    def kept_paths(self) -> list[str]: ...
    @property
    def unreadable_dirs(self) -> list[str]:
        """Directories under blobs/ that could not be listed ('<path>: <reason>'): neither looked at nor removed."""

def store_list(dir: Union[str, os.PathLike]) -> list[StoreEntryInfo]:
    """The committed entries of a store directory. dir of another type (None) raises TypeError naming
    store_list: dir, and '' ValueError naming it, as the other store_* functions name theirs."""
def store_summary(dir: Union[str, os.PathLike]) -> StoreSummary:
    """A StoreSummary of a store directory."""
def store_verify(dir: Union[str, os.PathLike]) -> VerifyReport:
    """Checks every blob's size and checksum, and the index with SQLite's integrity_check (index_damage)."""
def store_gc(dir: Union[str, os.PathLike], *, dry_run: bool = False) -> GcReport:
    """Removes unreferenced blobs and temp files (the store must be closed everywhere)."""
class RepairReport:
    """What store_repair() did."""
    @property
    def blobs_scanned(self) -> int: ...
    @property
    def rows_restored(self) -> int: ...
    @property
    def rows_dropped(self) -> int: ...
    @property
    def blobs_rejected(self) -> int: ...
    @property
    def meta_restored(self) -> bool: ...
    @property
    def index_reindexed(self) -> bool:
        """SQLite found the index inconsistent and REINDEX rebuilt its indexes (a note says why)."""
    @property
    def model_fingerprint(self) -> str: ...
    @property
    def notes(self) -> list[str]: ...

class RemoteSummary:
    """What store_remote_summary() found on a remote tier's server(s)."""
    @property
    def url(self) -> str: ...
    @property
    def reachable(self) -> bool: ...
    @property
    def error(self) -> str: ...
    @property
    def cluster(self) -> bool: ...
    @property
    def nodes(self) -> list[str]: ...
    @property
    def entries(self) -> int: ...
    @property
    def keys(self) -> int: ...
    @property
    def used_memory_bytes(self) -> int: ...
    @property
    def maxmemory_bytes(self) -> int: ...
    @property
    def maxmemory_policy(self) -> str: ...
    @property
    def server_version(self) -> str: ...

def store_repair(dir: Union[str, os.PathLike]) -> RepairReport:
    """Rebuilds a store's index from its verified blobs (the store must be closed everywhere)."""
def store_remote_summary(url: str) -> RemoteSummary:
    """Connects to a remote tier and counts orbit's entries (unreachable: reachable=False)."""
def chunk_key_tokens(model_fingerprint: str, tokens: Tokens) -> str:
    """The content key of a token chunk for a model."""
def is_store_key(key: str) -> bool:
    """True for 64 lowercase hex characters."""

# ---- traces (orbit-trace/1; a trace and a replay report are dicts: their JSON) ----------------------------
TraceArg = Union[dict, str, os.PathLike]
TRACE_FORMAT: str

def load_trace(path: TraceArg) -> dict:
    """Reads and validates an orbit-trace/1 file; returns it as a dict."""
def validate_trace(trace: TraceArg) -> None:
    """Checks a trace (dict or path); raises OrbitError naming the step and field at fault."""
def save_trace(trace: TraceArg, path: Union[str, bytes, os.PathLike]) -> None:
    """Validates a trace and writes it to PATH atomically."""
def make_trace(
    kind: str = "web",
    *,
    steps: SupportsIndex = 12,
    seed: SupportsIndex = 0,
    max_positions: SupportsIndex = 512,
    position_rows: SupportsIndex = 1,
    chunk_tokens: SupportsIndex = 0,
    sample_text: bool = False,
) -> dict:
    """A synthetic agent trace: kind 'web', 'video' or 'agent' (random token ids), or an agent pattern of
    story-like text: 'browse', 'coding', 'videoqa', 'fanout' or 'rag' (sizes counted as UTF-8 bytes + 1);
    sample_text: web's observations and agent's documents sampled from the model at replay (kinds 'web' and
    'agent' only)."""
def replay(
    trace: TraceArg,
    model: Union[str, bytes, os.PathLike],
    *,
    policies: Sequence[str] = ("default",),
    baselines: bool = True,
    fidelity: bool = True,
    explain: bool = False,
    attribute: bool = False,
    threads: SupportsIndex = 0,
    pool_bytes: SupportsIndex = ...,
    page_size: SupportsIndex = 16,
    device: str = "cpu",
    dtype: str = "float32",
    host_budget_bytes: SupportsIndex = 1073741824,
    eviction: str = "lru",
    device_tier_bytes: SupportsIndex = 0,
    progress: Optional[Callable[[int, int, int, int, str], object]] = None,
) -> dict:
    """Replays a trace under each policy (plus reprefill, prefix, blind); the report as a dict. Each policy is
    one column: two specs that give the same policy raise OrbitError naming both."""


class RadixCache:
    """SGLang's radix cache at token granularity (planner/prefix_cache.h)."""
    def __init__(self, capacity_tokens: SupportsIndex = 0) -> None: ...
    def read(self, prompt: Tokens, generated: Tokens = ...) -> int: ...
    @property
    def size(self) -> int: ...

class BlockPrefixCache:
    """vLLM's automatic prefix caching: hash-chained full blocks (planner/prefix_cache.h)."""
    def __init__(self, capacity_tokens: SupportsIndex = 0, block_tokens: SupportsIndex = 16) -> None: ...
    def read(self, prompt: Tokens, generated: Tokens = ...) -> int: ...
    @property
    def size(self) -> int: ...
