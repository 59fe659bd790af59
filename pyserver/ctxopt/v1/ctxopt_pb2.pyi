from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_MODEL: _ClassVar[Role]
    ROLE_TOOL: _ClassVar[Role]

class ChunkKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHUNK_KIND_UNSPECIFIED: _ClassVar[ChunkKind]
    CHUNK_KIND_MESSAGE: _ClassVar[ChunkKind]
    CHUNK_KIND_CODE: _ClassVar[ChunkKind]
    CHUNK_KIND_LOG: _ClassVar[ChunkKind]
    CHUNK_KIND_NOTE: _ClassVar[ChunkKind]
    CHUNK_KIND_DECISION: _ClassVar[ChunkKind]
    CHUNK_KIND_SUMMARY: _ClassVar[ChunkKind]
    CHUNK_KIND_TOOL_CALL: _ClassVar[ChunkKind]
    CHUNK_KIND_TOOL_RESULT: _ClassVar[ChunkKind]
    CHUNK_KIND_SYSTEM: _ClassVar[ChunkKind]
    CHUNK_KIND_ENRICHMENT: _ClassVar[ChunkKind]
    CHUNK_KIND_TOOL_SCHEMA: _ClassVar[ChunkKind]
    CHUNK_KIND_MEMORY: _ClassVar[ChunkKind]

class GcPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GC_POLICY_UNSPECIFIED: _ClassVar[GcPolicy]
    GC_POLICY_LOCKED: _ClassVar[GcPolicy]
    GC_POLICY_PRESERVABLE: _ClassVar[GcPolicy]
    GC_POLICY_PARTIAL: _ClassVar[GcPolicy]
    GC_POLICY_EPHEMERAL: _ClassVar[GcPolicy]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_UNSPECIFIED: _ClassVar[Action]
    ACTION_KEEP: _ClassVar[Action]
    ACTION_TRIM: _ClassVar[Action]
    ACTION_MASK: _ClassVar[Action]
    ACTION_STASH: _ClassVar[Action]
    ACTION_DELETE: _ClassVar[Action]

class Strategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STRATEGY_UNSPECIFIED: _ClassVar[Strategy]
    STRATEGY_HYBRID: _ClassVar[Strategy]
    STRATEGY_BUDGET: _ClassVar[Strategy]
    STRATEGY_TRUNCATE: _ClassVar[Strategy]

class UpsertStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    UPSERT_STATUS_UNSPECIFIED: _ClassVar[UpsertStatus]
    UPSERT_STATUS_ADDED: _ClassVar[UpsertStatus]
    UPSERT_STATUS_UNCHANGED: _ClassVar[UpsertStatus]
    UPSERT_STATUS_UPDATED: _ClassVar[UpsertStatus]

class UsageGroup(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USAGE_GROUP_UNSPECIFIED: _ClassVar[UsageGroup]
    USAGE_GROUP_DAY: _ClassVar[UsageGroup]
    USAGE_GROUP_HOST: _ClassVar[UsageGroup]
    USAGE_GROUP_MODEL: _ClassVar[UsageGroup]
    USAGE_GROUP_SESSION: _ClassVar[UsageGroup]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_USER: Role
ROLE_MODEL: Role
ROLE_TOOL: Role
CHUNK_KIND_UNSPECIFIED: ChunkKind
CHUNK_KIND_MESSAGE: ChunkKind
CHUNK_KIND_CODE: ChunkKind
CHUNK_KIND_LOG: ChunkKind
CHUNK_KIND_NOTE: ChunkKind
CHUNK_KIND_DECISION: ChunkKind
CHUNK_KIND_SUMMARY: ChunkKind
CHUNK_KIND_TOOL_CALL: ChunkKind
CHUNK_KIND_TOOL_RESULT: ChunkKind
CHUNK_KIND_SYSTEM: ChunkKind
CHUNK_KIND_ENRICHMENT: ChunkKind
CHUNK_KIND_TOOL_SCHEMA: ChunkKind
CHUNK_KIND_MEMORY: ChunkKind
GC_POLICY_UNSPECIFIED: GcPolicy
GC_POLICY_LOCKED: GcPolicy
GC_POLICY_PRESERVABLE: GcPolicy
GC_POLICY_PARTIAL: GcPolicy
GC_POLICY_EPHEMERAL: GcPolicy
ACTION_UNSPECIFIED: Action
ACTION_KEEP: Action
ACTION_TRIM: Action
ACTION_MASK: Action
ACTION_STASH: Action
ACTION_DELETE: Action
STRATEGY_UNSPECIFIED: Strategy
STRATEGY_HYBRID: Strategy
STRATEGY_BUDGET: Strategy
STRATEGY_TRUNCATE: Strategy
UPSERT_STATUS_UNSPECIFIED: UpsertStatus
UPSERT_STATUS_ADDED: UpsertStatus
UPSERT_STATUS_UNCHANGED: UpsertStatus
UPSERT_STATUS_UPDATED: UpsertStatus
USAGE_GROUP_UNSPECIFIED: UsageGroup
USAGE_GROUP_DAY: UsageGroup
USAGE_GROUP_HOST: UsageGroup
USAGE_GROUP_MODEL: UsageGroup
USAGE_GROUP_SESSION: UsageGroup

class Chunk(_message.Message):
    __slots__ = ("id", "role", "kind", "text", "tokens", "created_at_ms", "turn", "pinned", "policy", "group_id", "parent_id", "references", "file_path", "line_start", "line_end", "tags", "topic_id", "task_id", "boost", "embedding", "summary_of", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_START_FIELD_NUMBER: _ClassVar[int]
    LINE_END_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    BOOST_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_OF_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    role: Role
    kind: ChunkKind
    text: str
    tokens: int
    created_at_ms: int
    turn: int
    pinned: bool
    policy: GcPolicy
    group_id: str
    parent_id: str
    references: _containers.RepeatedScalarFieldContainer[str]
    file_path: str
    line_start: int
    line_end: int
    tags: _containers.RepeatedScalarFieldContainer[str]
    topic_id: str
    task_id: str
    boost: float
    embedding: _containers.RepeatedScalarFieldContainer[float]
    summary_of: _containers.RepeatedScalarFieldContainer[str]
    metadata: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., kind: _Optional[_Union[ChunkKind, str]] = ..., text: _Optional[str] = ..., tokens: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., turn: _Optional[int] = ..., pinned: _Optional[bool] = ..., policy: _Optional[_Union[GcPolicy, str]] = ..., group_id: _Optional[str] = ..., parent_id: _Optional[str] = ..., references: _Optional[_Iterable[str]] = ..., file_path: _Optional[str] = ..., line_start: _Optional[int] = ..., line_end: _Optional[int] = ..., tags: _Optional[_Iterable[str]] = ..., topic_id: _Optional[str] = ..., task_id: _Optional[str] = ..., boost: _Optional[float] = ..., embedding: _Optional[_Iterable[float]] = ..., summary_of: _Optional[_Iterable[str]] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("context_limit_tokens", "threshold_percent", "target_percent", "pressure_percent", "target_tokens")
    CONTEXT_LIMIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_PERCENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_PERCENT_FIELD_NUMBER: _ClassVar[int]
    PRESSURE_PERCENT_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    context_limit_tokens: int
    threshold_percent: float
    target_percent: float
    pressure_percent: float
    target_tokens: int
    def __init__(self, context_limit_tokens: _Optional[int] = ..., threshold_percent: _Optional[float] = ..., target_percent: _Optional[float] = ..., pressure_percent: _Optional[float] = ..., target_tokens: _Optional[int] = ...) -> None: ...

class Roots(_message.Message):
    __slots__ = ("current_task_id", "active_file_path", "recent_turns", "root_ids")
    CURRENT_TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    RECENT_TURNS_FIELD_NUMBER: _ClassVar[int]
    ROOT_IDS_FIELD_NUMBER: _ClassVar[int]
    current_task_id: str
    active_file_path: str
    recent_turns: int
    root_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, current_task_id: _Optional[str] = ..., active_file_path: _Optional[str] = ..., recent_turns: _Optional[int] = ..., root_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class Weights(_message.Message):
    __slots__ = ("bm25", "recency", "gc", "embedding", "boost")
    BM25_FIELD_NUMBER: _ClassVar[int]
    RECENCY_FIELD_NUMBER: _ClassVar[int]
    GC_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    BOOST_FIELD_NUMBER: _ClassVar[int]
    bm25: float
    recency: float
    gc: float
    embedding: float
    boost: float
    def __init__(self, bm25: _Optional[float] = ..., recency: _Optional[float] = ..., gc: _Optional[float] = ..., embedding: _Optional[float] = ..., boost: _Optional[float] = ...) -> None: ...

class ScoreBreakdown(_message.Message):
    __slots__ = ("bm25", "recency", "gc", "embedding", "boost", "reachable", "root", "total")
    BM25_FIELD_NUMBER: _ClassVar[int]
    RECENCY_FIELD_NUMBER: _ClassVar[int]
    GC_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    BOOST_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    bm25: float
    recency: float
    gc: float
    embedding: float
    boost: float
    reachable: bool
    root: bool
    total: float
    def __init__(self, bm25: _Optional[float] = ..., recency: _Optional[float] = ..., gc: _Optional[float] = ..., embedding: _Optional[float] = ..., boost: _Optional[float] = ..., reachable: _Optional[bool] = ..., root: _Optional[bool] = ..., total: _Optional[float] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("chunk_id", "action", "tokens", "tokens_after", "score", "breakdown", "reasons", "replacement_text", "stash_id")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENT_TEXT_FIELD_NUMBER: _ClassVar[int]
    STASH_ID_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    action: Action
    tokens: int
    tokens_after: int
    score: float
    breakdown: ScoreBreakdown
    reasons: _containers.RepeatedScalarFieldContainer[str]
    replacement_text: str
    stash_id: str
    def __init__(self, chunk_id: _Optional[str] = ..., action: _Optional[_Union[Action, str]] = ..., tokens: _Optional[int] = ..., tokens_after: _Optional[int] = ..., score: _Optional[float] = ..., breakdown: _Optional[_Union[ScoreBreakdown, _Mapping]] = ..., reasons: _Optional[_Iterable[str]] = ..., replacement_text: _Optional[str] = ..., stash_id: _Optional[str] = ...) -> None: ...

class Repair(_message.Message):
    __slots__ = ("rule", "chunk_id", "detail")
    RULE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    rule: str
    chunk_id: str
    detail: str
    def __init__(self, rule: _Optional[str] = ..., chunk_id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ChunkTokens(_message.Message):
    __slots__ = ("id", "tokens", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: str
    tokens: int
    status: UpsertStatus
    def __init__(self, id: _Optional[str] = ..., tokens: _Optional[int] = ..., status: _Optional[_Union[UpsertStatus, str]] = ...) -> None: ...

class AppendChunksRequest(_message.Message):
    __slots__ = ("session_id", "chunks")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    chunks: _containers.RepeatedCompositeFieldContainer[Chunk]
    def __init__(self, session_id: _Optional[str] = ..., chunks: _Optional[_Iterable[_Union[Chunk, _Mapping]]] = ...) -> None: ...

class AppendChunksResponse(_message.Message):
    __slots__ = ("chunks", "session_tokens", "session_chunks")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SESSION_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[ChunkTokens]
    session_tokens: int
    session_chunks: int
    def __init__(self, chunks: _Optional[_Iterable[_Union[ChunkTokens, _Mapping]]] = ..., session_tokens: _Optional[int] = ..., session_chunks: _Optional[int] = ...) -> None: ...

class ChunkUpdate(_message.Message):
    __slots__ = ("id", "pinned", "policy", "touch", "references", "replace_references", "boost")
    ID_FIELD_NUMBER: _ClassVar[int]
    PINNED_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOUCH_FIELD_NUMBER: _ClassVar[int]
    REFERENCES_FIELD_NUMBER: _ClassVar[int]
    REPLACE_REFERENCES_FIELD_NUMBER: _ClassVar[int]
    BOOST_FIELD_NUMBER: _ClassVar[int]
    id: str
    pinned: bool
    policy: GcPolicy
    touch: bool
    references: _containers.RepeatedScalarFieldContainer[str]
    replace_references: bool
    boost: float
    def __init__(self, id: _Optional[str] = ..., pinned: _Optional[bool] = ..., policy: _Optional[_Union[GcPolicy, str]] = ..., touch: _Optional[bool] = ..., references: _Optional[_Iterable[str]] = ..., replace_references: _Optional[bool] = ..., boost: _Optional[float] = ...) -> None: ...

class UpdateChunksRequest(_message.Message):
    __slots__ = ("session_id", "updates")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    updates: _containers.RepeatedCompositeFieldContainer[ChunkUpdate]
    def __init__(self, session_id: _Optional[str] = ..., updates: _Optional[_Iterable[_Union[ChunkUpdate, _Mapping]]] = ...) -> None: ...

class UpdateChunksResponse(_message.Message):
    __slots__ = ("updated",)
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    updated: int
    def __init__(self, updated: _Optional[int] = ...) -> None: ...

class RemoveChunksRequest(_message.Message):
    __slots__ = ("session_id", "chunk_ids", "stash")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    STASH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    stash: bool
    def __init__(self, session_id: _Optional[str] = ..., chunk_ids: _Optional[_Iterable[str]] = ..., stash: _Optional[bool] = ...) -> None: ...

class RemoveChunksResponse(_message.Message):
    __slots__ = ("removed", "session_tokens")
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    removed: int
    session_tokens: int
    def __init__(self, removed: _Optional[int] = ..., session_tokens: _Optional[int] = ...) -> None: ...

class OptimizeRequest(_message.Message):
    __slots__ = ("session_id", "query", "query_embedding", "budget", "roots", "dry_run", "weights", "aggressive", "strategy", "force", "delete_ids", "max_chunks", "incremental", "lean", "keep_plan", "base_plan_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    AGGRESSIVE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    DELETE_IDS_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_FIELD_NUMBER: _ClassVar[int]
    LEAN_FIELD_NUMBER: _ClassVar[int]
    KEEP_PLAN_FIELD_NUMBER: _ClassVar[int]
    BASE_PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    query: str
    query_embedding: _containers.RepeatedScalarFieldContainer[float]
    budget: Budget
    roots: Roots
    dry_run: bool
    weights: Weights
    aggressive: bool
    strategy: Strategy
    force: bool
    delete_ids: _containers.RepeatedScalarFieldContainer[str]
    max_chunks: int
    incremental: bool
    lean: bool
    keep_plan: bool
    base_plan_id: str
    def __init__(self, session_id: _Optional[str] = ..., query: _Optional[str] = ..., query_embedding: _Optional[_Iterable[float]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., roots: _Optional[_Union[Roots, _Mapping]] = ..., dry_run: _Optional[bool] = ..., weights: _Optional[_Union[Weights, _Mapping]] = ..., aggressive: _Optional[bool] = ..., strategy: _Optional[_Union[Strategy, str]] = ..., force: _Optional[bool] = ..., delete_ids: _Optional[_Iterable[str]] = ..., max_chunks: _Optional[int] = ..., incremental: _Optional[bool] = ..., lean: _Optional[bool] = ..., keep_plan: _Optional[bool] = ..., base_plan_id: _Optional[str] = ...) -> None: ...

class OptimizeResponse(_message.Message):
    __slots__ = ("kept_ids", "decisions", "tokens_before", "tokens_after", "target_tokens", "triggered", "feasible", "repairs", "server_ms", "explanation", "mandatory_tokens", "plan_id", "base_plan_id", "kept_runs", "decision_runs", "decision_scores")
    KEPT_IDS_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRIGGERED_FIELD_NUMBER: _ClassVar[int]
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    REPAIRS_FIELD_NUMBER: _ClassVar[int]
    SERVER_MS_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    MANDATORY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_PLAN_ID_FIELD_NUMBER: _ClassVar[int]
    KEPT_RUNS_FIELD_NUMBER: _ClassVar[int]
    DECISION_RUNS_FIELD_NUMBER: _ClassVar[int]
    DECISION_SCORES_FIELD_NUMBER: _ClassVar[int]
    kept_ids: _containers.RepeatedScalarFieldContainer[str]
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    tokens_before: int
    tokens_after: int
    target_tokens: int
    triggered: bool
    feasible: bool
    repairs: _containers.RepeatedCompositeFieldContainer[Repair]
    server_ms: float
    explanation: str
    mandatory_tokens: int
    plan_id: str
    base_plan_id: str
    kept_runs: _containers.RepeatedScalarFieldContainer[int]
    decision_runs: _containers.RepeatedScalarFieldContainer[int]
    decision_scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, kept_ids: _Optional[_Iterable[str]] = ..., decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., target_tokens: _Optional[int] = ..., triggered: _Optional[bool] = ..., feasible: _Optional[bool] = ..., repairs: _Optional[_Iterable[_Union[Repair, _Mapping]]] = ..., server_ms: _Optional[float] = ..., explanation: _Optional[str] = ..., mandatory_tokens: _Optional[int] = ..., plan_id: _Optional[str] = ..., base_plan_id: _Optional[str] = ..., kept_runs: _Optional[_Iterable[int]] = ..., decision_runs: _Optional[_Iterable[int]] = ..., decision_scores: _Optional[_Iterable[float]] = ...) -> None: ...

class ChunkScore(_message.Message):
    __slots__ = ("chunk_id", "tokens", "breakdown")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    tokens: int
    breakdown: ScoreBreakdown
    def __init__(self, chunk_id: _Optional[str] = ..., tokens: _Optional[int] = ..., breakdown: _Optional[_Union[ScoreBreakdown, _Mapping]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("session_id", "query", "query_embedding", "roots", "weights")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    query: str
    query_embedding: _containers.RepeatedScalarFieldContainer[float]
    roots: Roots
    weights: Weights
    def __init__(self, session_id: _Optional[str] = ..., query: _Optional[str] = ..., query_embedding: _Optional[_Iterable[float]] = ..., roots: _Optional[_Union[Roots, _Mapping]] = ..., weights: _Optional[_Union[Weights, _Mapping]] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("scores",)
    SCORES_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[ChunkScore]
    def __init__(self, scores: _Optional[_Iterable[_Union[ChunkScore, _Mapping]]] = ...) -> None: ...

class OptimizeContextRequest(_message.Message):
    __slots__ = ("chunks", "query", "query_embedding", "budget", "roots", "weights", "aggressive", "strategy", "force", "max_chunks")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    AGGRESSIVE_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[Chunk]
    query: str
    query_embedding: _containers.RepeatedScalarFieldContainer[float]
    budget: Budget
    roots: Roots
    weights: Weights
    aggressive: bool
    strategy: Strategy
    force: bool
    max_chunks: int
    def __init__(self, chunks: _Optional[_Iterable[_Union[Chunk, _Mapping]]] = ..., query: _Optional[str] = ..., query_embedding: _Optional[_Iterable[float]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., roots: _Optional[_Union[Roots, _Mapping]] = ..., weights: _Optional[_Union[Weights, _Mapping]] = ..., aggressive: _Optional[bool] = ..., strategy: _Optional[_Union[Strategy, str]] = ..., force: _Optional[bool] = ..., max_chunks: _Optional[int] = ...) -> None: ...

class OptimizeContextResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: OptimizeResponse
    def __init__(self, result: _Optional[_Union[OptimizeResponse, _Mapping]] = ...) -> None: ...

class StashFilter(_message.Message):
    __slots__ = ("kinds", "tags", "file_path", "task_id", "from_ms", "to_ms")
    KINDS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    FILE_PATH_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    kinds: _containers.RepeatedScalarFieldContainer[ChunkKind]
    tags: _containers.RepeatedScalarFieldContainer[str]
    file_path: str
    task_id: str
    from_ms: int
    to_ms: int
    def __init__(self, kinds: _Optional[_Iterable[_Union[ChunkKind, str]]] = ..., tags: _Optional[_Iterable[str]] = ..., file_path: _Optional[str] = ..., task_id: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ...) -> None: ...

class SearchStashRequest(_message.Message):
    __slots__ = ("session_id", "query", "filters", "limit", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    query: str
    filters: StashFilter
    limit: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., query: _Optional[str] = ..., filters: _Optional[_Union[StashFilter, _Mapping]] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class StashHit(_message.Message):
    __slots__ = ("stash_id", "chunk_id", "session_id", "kind", "score", "snippet", "tokens", "action", "stashed_at_ms")
    STASH_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    SNIPPET_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    STASHED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    stash_id: str
    chunk_id: str
    session_id: str
    kind: ChunkKind
    score: float
    snippet: str
    tokens: int
    action: Action
    stashed_at_ms: int
    def __init__(self, stash_id: _Optional[str] = ..., chunk_id: _Optional[str] = ..., session_id: _Optional[str] = ..., kind: _Optional[_Union[ChunkKind, str]] = ..., score: _Optional[float] = ..., snippet: _Optional[str] = ..., tokens: _Optional[int] = ..., action: _Optional[_Union[Action, str]] = ..., stashed_at_ms: _Optional[int] = ...) -> None: ...

class SearchStashResponse(_message.Message):
    __slots__ = ("hits", "next_page_token")
    HITS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    hits: _containers.RepeatedCompositeFieldContainer[StashHit]
    next_page_token: str
    def __init__(self, hits: _Optional[_Iterable[_Union[StashHit, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class RestoreRequest(_message.Message):
    __slots__ = ("session_id", "chunk_ids", "budget", "force")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    chunk_ids: _containers.RepeatedScalarFieldContainer[str]
    budget: Budget
    force: bool
    def __init__(self, session_id: _Optional[str] = ..., chunk_ids: _Optional[_Iterable[str]] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., force: _Optional[bool] = ...) -> None: ...

class RestoreResponse(_message.Message):
    __slots__ = ("restored_ids", "session_tokens")
    RESTORED_IDS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    restored_ids: _containers.RepeatedScalarFieldContainer[str]
    session_tokens: int
    def __init__(self, restored_ids: _Optional[_Iterable[str]] = ..., session_tokens: _Optional[int] = ...) -> None: ...

class GetSessionStatsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GetSessionStatsResponse(_message.Message):
    __slots__ = ("chunk_count", "tokens", "stashed_count", "stashed_tokens", "collections", "tokens_by_policy", "old_generation_chunks")
    class TokensByPolicyEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STASHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    STASHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COLLECTIONS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BY_POLICY_FIELD_NUMBER: _ClassVar[int]
    OLD_GENERATION_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunk_count: int
    tokens: int
    stashed_count: int
    stashed_tokens: int
    collections: int
    tokens_by_policy: _containers.ScalarMap[str, int]
    old_generation_chunks: int
    def __init__(self, chunk_count: _Optional[int] = ..., tokens: _Optional[int] = ..., stashed_count: _Optional[int] = ..., stashed_tokens: _Optional[int] = ..., collections: _Optional[int] = ..., tokens_by_policy: _Optional[_Mapping[str, int]] = ..., old_generation_chunks: _Optional[int] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id", "purge_stash")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PURGE_STASH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    purge_stash: bool
    def __init__(self, session_id: _Optional[str] = ..., purge_stash: _Optional[bool] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ExportSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ExportSessionResponse(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class ImportSessionRequest(_message.Message):
    __slots__ = ("json", "replace")
    JSON_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    json: str
    replace: bool
    def __init__(self, json: _Optional[str] = ..., replace: _Optional[bool] = ...) -> None: ...

class ImportSessionResponse(_message.Message):
    __slots__ = ("session_id", "chunk_count")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    chunk_count: int
    def __init__(self, session_id: _Optional[str] = ..., chunk_count: _Optional[int] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("default_budget", "max_chunks_per_request", "max_chunks_per_session", "max_text_chars", "max_message_bytes", "version")
    DEFAULT_BUDGET_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNKS_PER_REQUEST_FIELD_NUMBER: _ClassVar[int]
    MAX_CHUNKS_PER_SESSION_FIELD_NUMBER: _ClassVar[int]
    MAX_TEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    default_budget: Budget
    max_chunks_per_request: int
    max_chunks_per_session: int
    max_text_chars: int
    max_message_bytes: int
    version: str
    def __init__(self, default_budget: _Optional[_Union[Budget, _Mapping]] = ..., max_chunks_per_request: _Optional[int] = ..., max_chunks_per_session: _Optional[int] = ..., max_text_chars: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., version: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class SessionSummary(_message.Message):
    __slots__ = ("session_id", "chunk_count", "tokens", "stashed_count", "stashed_tokens", "last_used_unix_ms")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    STASHED_COUNT_FIELD_NUMBER: _ClassVar[int]
    STASHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    chunk_count: int
    tokens: int
    stashed_count: int
    stashed_tokens: int
    last_used_unix_ms: int
    def __init__(self, session_id: _Optional[str] = ..., chunk_count: _Optional[int] = ..., tokens: _Optional[int] = ..., stashed_count: _Optional[int] = ..., stashed_tokens: _Optional[int] = ..., last_used_unix_ms: _Optional[int] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "total")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionSummary]
    total: int
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionSummary, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class GetLastPlanRequest(_message.Message):
    __slots__ = ("session_id", "top")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    top: int
    def __init__(self, session_id: _Optional[str] = ..., top: _Optional[int] = ...) -> None: ...

class KindTokens(_message.Message):
    __slots__ = ("kind", "chunk_count", "tokens", "tokens_after")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CHUNK_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    kind: ChunkKind
    chunk_count: int
    tokens: int
    tokens_after: int
    def __init__(self, kind: _Optional[_Union[ChunkKind, str]] = ..., chunk_count: _Optional[int] = ..., tokens: _Optional[int] = ..., tokens_after: _Optional[int] = ...) -> None: ...

class PlannedChunk(_message.Message):
    __slots__ = ("chunk_id", "kind", "role", "tokens", "tokens_after", "action", "reasons", "stash_id", "preview")
    CHUNK_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    STASH_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    chunk_id: str
    kind: ChunkKind
    role: Role
    tokens: int
    tokens_after: int
    action: Action
    reasons: _containers.RepeatedScalarFieldContainer[str]
    stash_id: str
    preview: str
    def __init__(self, chunk_id: _Optional[str] = ..., kind: _Optional[_Union[ChunkKind, str]] = ..., role: _Optional[_Union[Role, str]] = ..., tokens: _Optional[int] = ..., tokens_after: _Optional[int] = ..., action: _Optional[_Union[Action, str]] = ..., reasons: _Optional[_Iterable[str]] = ..., stash_id: _Optional[str] = ..., preview: _Optional[str] = ...) -> None: ...

class GetLastPlanResponse(_message.Message):
    __slots__ = ("found", "planned_unix_ms", "tokens_before", "tokens_after", "target_tokens", "dry_run", "kinds", "largest")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    PLANNED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    LARGEST_FIELD_NUMBER: _ClassVar[int]
    found: bool
    planned_unix_ms: int
    tokens_before: int
    tokens_after: int
    target_tokens: int
    dry_run: bool
    kinds: _containers.RepeatedCompositeFieldContainer[KindTokens]
    largest: _containers.RepeatedCompositeFieldContainer[PlannedChunk]
    def __init__(self, found: _Optional[bool] = ..., planned_unix_ms: _Optional[int] = ..., tokens_before: _Optional[int] = ..., tokens_after: _Optional[int] = ..., target_tokens: _Optional[int] = ..., dry_run: _Optional[bool] = ..., kinds: _Optional[_Iterable[_Union[KindTokens, _Mapping]]] = ..., largest: _Optional[_Iterable[_Union[PlannedChunk, _Mapping]]] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("group_by", "since_unix_ms", "utc_offset_minutes")
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UTC_OFFSET_MINUTES_FIELD_NUMBER: _ClassVar[int]
    group_by: UsageGroup
    since_unix_ms: int
    utc_offset_minutes: int
    def __init__(self, group_by: _Optional[_Union[UsageGroup, str]] = ..., since_unix_ms: _Optional[int] = ..., utc_offset_minutes: _Optional[int] = ...) -> None: ...

class UsageTotals(_message.Message):
    __slots__ = ("key", "calls", "calls_optimized", "tokens_sent", "tokens_forwarded", "tokens_saved", "priced_calls", "input_tokens", "cached_tokens", "output_tokens", "billed_input_usd", "unpruned_input_usd", "saved_usd")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CALLS_OPTIMIZED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_SENT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FORWARDED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_SAVED_FIELD_NUMBER: _ClassVar[int]
    PRICED_CALLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BILLED_INPUT_USD_FIELD_NUMBER: _ClassVar[int]
    UNPRUNED_INPUT_USD_FIELD_NUMBER: _ClassVar[int]
    SAVED_USD_FIELD_NUMBER: _ClassVar[int]
    key: str
    calls: int
    calls_optimized: int
    tokens_sent: int
    tokens_forwarded: int
    tokens_saved: int
    priced_calls: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    billed_input_usd: float
    unpruned_input_usd: float
    saved_usd: float
    def __init__(self, key: _Optional[str] = ..., calls: _Optional[int] = ..., calls_optimized: _Optional[int] = ..., tokens_sent: _Optional[int] = ..., tokens_forwarded: _Optional[int] = ..., tokens_saved: _Optional[int] = ..., priced_calls: _Optional[int] = ..., input_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., billed_input_usd: _Optional[float] = ..., unpruned_input_usd: _Optional[float] = ..., saved_usd: _Optional[float] = ...) -> None: ...

class GetUsageResponse(_message.Message):
    __slots__ = ("rows", "total", "prices_checked", "retention_days")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PRICES_CHECKED_FIELD_NUMBER: _ClassVar[int]
    RETENTION_DAYS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[UsageTotals]
    total: UsageTotals
    prices_checked: str
    retention_days: int
    def __init__(self, rows: _Optional[_Iterable[_Union[UsageTotals, _Mapping]]] = ..., total: _Optional[_Union[UsageTotals, _Mapping]] = ..., prices_checked: _Optional[str] = ..., retention_days: _Optional[int] = ...) -> None: ...
