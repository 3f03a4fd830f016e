"""orbit: context windows as sets of reusable KV chunks.

The Python face of orbit's C++ SDK (sdk/include/orbit/*.h are the specification)::

    import orbit

    with orbit.Engine("models/stories260K/stories260K.bin", store_dir="store") as engine:
        page = engine.add_tokens([1, 365, 169, 44], label="page 1")
        frame = engine.add_embeddings(numpy_or_torch_array, label="frame 0")   # [n, hidden]
        window = engine.new_window(policy="patch:16")
        window.admit(page)                       # plan + apply in one call
        plan = window.plan_admit(frame)          # or plan first: what, what it costs, exact or not
        print(plan.describe())
        window.apply(plan)
        window.add_turn([1, 2, 3])
        branch = window.fork()                   # a speculative branch: copy-on-write
        branch.slide(1)
        logits = branch.logits([5, 6])           # numpy float32 [vocab]
        branch.close()                           # drop the branch (or keep using it: commit)
        print(window.generate([5, 6], max_tokens=8).tokens)
        for piece in window.stream("Once", max_tokens=32, stop="."):   # text as it is decoded
            print(piece, end="", flush=True)

Errors: misuse and bad input reported by the C++ core raise OrbitError (a RuntimeError) carrying the C++
message; wrong Python types or array dtypes raise TypeError and wrong shapes ValueError before reaching C++.
An operation the window cannot hold (a full pool, max_bytes) raises CapacityError, one it refuses (positions
past the model's limit) RefusedError -- both subclasses of OrbitError, both leaving the window unchanged.
Plan first (plan_*) and check Plan.device_bytes_after to avoid them.
Engine(remote=...) pings the remote tier once as it opens: one that does not answer issues a
RemoteUnreachableWarning (through the warnings module) naming the URL and the cause, and the engine opens on its
local tiers. The store's warnings (a disk write that failed, an engine closed with entries that never reached
the disk, a corrupt blob, a remote tier that went down) are OrbitWarning (a UserWarning), also through the
warnings module, so they can be filtered, caught with pytest.warns or made errors. RemoteUnreachableWarning is
an OrbitWarning too (and a RuntimeWarning): a filter on OrbitWarning takes every warning orbit issues.

A store directory can be inspected offline: `with orbit.Store("store") as s: for entry in s: ...`.

Traces (orbit-trace/1, the format `orbit replay` reads) are plain dicts: make_trace() generates one,
load_trace()/save_trace() read and write files, and replay(trace, model, policies=[...]) runs it under each
policy side by side with the baselines and returns the report (forward tokens, time, fidelity per step).

The GIL is released while the C++ core works (loading, encoding, applying, decoding), so windows can be driven
from several threads; calls on one window are serialized. For asyncio, orbit.aio has the model calls as
coroutines (`from orbit import aio`; aio.AsyncWindow(window), aio.generate_many), cancellable by the task.
"""

import atexit as _atexit

from . import _orbit
from ._orbit import (  # noqa: F401  (re-exports)
    __version__,
    ApplyReport,
    IdleReport,
    BackgroundMode,
    BlobEncoding,
    CancelToken,
    CalibrationReport,
    CapacityError,
    ChunkKind,
    ChunkRef,
    DisposabilityReport,
    InstanceLoss,
    Engine,
    EngineOptions,
    EngineStats,
    ConstraintCacheOptions,
    ConstraintCacheStats,
    EntryKind,
    GcReport,
    Generation,
    generate_many,
    set_signal_interval,
    StepLogprobs,
    TokenLogprob,
    InstanceInfo,
    InstanceKV,
    MissAction,
    ModelInfo,
    Operation,
    OrbitError,
    parse_tool_calls,
    PatchMatch,
    Plan,
    PlanStep,
    Policy,
    RadixCache,
    BlockPrefixCache,
    OrbitWarning,
    RefusedError,
    RemoteUnreachableWarning,
    StalePatch,
    StepAction,
    SyncAction,
    SyncMemoLimits,
    SyncPlan,
    SyncReport,
    SyncUnit,
    set_sync_memo_limits,
    sync_memo_limits,
    RemoteStats,
    RemoteSummary,
    RepairReport,
    StoreEntryInfo,
    StoreStats,
    StoreSummary,
    StoreTier,
    SurvivorAction,
    TierStats,
    VerifyProblem,
    VerifyReport,
    Window,
    WindowPolicy,
    WindowStats,
    chunk_key_tokens,
    is_store_key,
    policy_help,
    store_gc,
    store_list,
    store_remote_summary,
    store_repair,
    store_summary,
    store_verify,
    TRACE_FORMAT,
    load_trace,
    make_trace,
    replay,
    save_trace,
    validate_trace,
)
from ._store import Store  # noqa: F401
from ._stream import GenerationStream, stream as _window_stream

Window.stream = _window_stream  # pure Python over Window.generate(on_text=...): _stream.py
del _window_stream

# The calls with many keywords name a misspelt one (pybind11 lists every signature instead): _keywords.py.
from ._keywords import name_keywords as _name_keywords  # noqa: E402

_name_keywords(Window, ("generate", "generate_n", "sync", "plan_sync", "prepare_sync", "logits", "reference_logits"))
_name_keywords(Engine, ("new_window", "add_tokens", "add_text", "add_embeddings", "find_media", "calibrate_fidelity",
                        "tokenize_chat"))
_name_keywords(globals(), ("set_sync_memo_limits", "make_trace", "replay", "generate_many"))
del _name_keywords

# Classes report themselves as orbit.X (not orbit._orbit.X or orbit._store.X) in reprs, tracebacks and help().
for _name, _obj in list(globals().items()):
    if isinstance(_obj, type) and getattr(_obj, "__module__", "") in ("orbit._orbit", "orbit._store",
                                                                      "orbit._stream"):
        try:
            _obj.__module__ = __name__
        except (AttributeError, TypeError):
            pass
del _name, _obj


def _made_by_the_api_only(cls, *args, **kwargs):
    raise TypeError(f"orbit.{cls.__name__} cannot be created directly: orbit's calls return it "
                    f"(help(orbit.{cls.__name__}) says which)")


# A class bound without a constructor (Window, ChunkRef, Generation, the reports and stats) is only made by the
# C++ side, which allocates its instances without __new__. pybind11's own __new__ gave `Window.__new__(Window)`
# an instance with no C++ object under it, whose methods then read uninitialized memory (a segfault, a hang on a
# garbage mutex); it is refused instead. pybind11 sets a constructor-less class's __init__ as a slot wrapper.
for _obj in vars(_orbit).values():
    if isinstance(_obj, type) and type(_obj.__dict__.get("__init__")).__name__ == "wrapper_descriptor":
        _obj.__new__ = staticmethod(_made_by_the_api_only)
del _obj


class _EnumType(type(_orbit.ChunkKind)):
    """The enums' type: pybind11's class type, with iteration as Python's enum has it. `list(orbit.ChunkKind)`
    is its members in value order, `len(orbit.ChunkKind)` their count, `x in orbit.ChunkKind` true for a member
    (pybind11's enums had only __members__: iterating one raised TypeError)."""

    def __iter__(cls):
        return iter(sorted(cls.__members__.values(), key=int))

    def __len__(cls):
        return len(cls.__members__)

    def __contains__(cls, value):
        return isinstance(value, cls)


for _obj in vars(_orbit).values():
    if isinstance(_obj, type) and "__entries" in _obj.__dict__:  # a pybind11 enum's members table
        _obj.__class__ = _EnumType
del _obj


__all__ = [
    "__version__",
    "ApplyReport",
    "IdleReport",
    "BackgroundMode",
    "BlobEncoding",
    "CancelToken",
    "CalibrationReport",
    "CapacityError",
    "ChunkKind",
    "ChunkRef",
    "DisposabilityReport",
    "InstanceLoss",
    "Engine",
    "EngineOptions",
    "EngineStats",
    "ConstraintCacheOptions",
    "ConstraintCacheStats",
    "EntryKind",
    "GcReport",
    "Generation",
    "GenerationStream",
    "generate_many",
    "set_signal_interval",
    "StepLogprobs",
    "TokenLogprob",
    "InstanceInfo",
    "InstanceKV",
    "MissAction",
    "ModelInfo",
    "Operation",
    "OrbitError",
    "parse_tool_calls",
    "PatchMatch",
    "Plan",
    "PlanStep",
    "Policy",
    "RadixCache",
    "BlockPrefixCache",
    "OrbitWarning",
    "RefusedError",
    "RemoteUnreachableWarning",
    "StalePatch",
    "StepAction",
    "SyncAction",
    "SyncMemoLimits",
    "SyncPlan",
    "SyncReport",
    "SyncUnit",
    "set_sync_memo_limits",
    "sync_memo_limits",
    "StoreEntryInfo",
    "StoreStats",
    "Store",
    "StoreSummary",
    "StoreTier",
    "SurvivorAction",
    "TierStats",
    "VerifyProblem",
    "VerifyReport",
    "Window",
    "WindowPolicy",
    "WindowStats",
    "chunk_key_tokens",
    "is_store_key",
    "policy_help",
    "store_gc",
    "store_list",
    "store_remote_summary",
    "store_repair",
    "RemoteStats",
    "RemoteSummary",
    "RepairReport",
    "store_summary",
    "store_verify",
    "TRACE_FORMAT",
    "load_trace",
    "make_trace",
    "replay",
    "save_trace",
    "validate_trace",
]

# Engines still open when the interpreter exits are closed first (while their daemon threads can still return
# into Python): a Window.stream left half-read, or run_background on a daemon thread, otherwise ended the process
# with std::terminate or a crash. Their close() warnings (entries only in memory) are written then.
_atexit.register(_orbit._close_engines_at_exit)
