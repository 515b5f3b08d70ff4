from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Compression(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPRESSION_NONE: _ClassVar[Compression]
    COMPRESSION_GZIP: _ClassVar[Compression]
    COMPRESSION_LZ4: _ClassVar[Compression]
COMPRESSION_NONE: Compression
COMPRESSION_GZIP: Compression
COMPRESSION_LZ4: Compression

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "extra_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    name: str
    extra_json: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., name: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class ChatCompletionRequest(_message.Message):
    __slots__ = ("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop", "seed", "presence_penalty", "frequency_penalty", "user", "include_usage", "extra_json", "response_compression", "lz4_request")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_USAGE_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_COMPRESSION_FIELD_NUMBER: _ClassVar[int]
    LZ4_REQUEST_FIELD_NUMBER: _ClassVar[int]
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    max_tokens: int
    max_completion_tokens: int
    temperature: float
    top_p: float
    n: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    seed: int
    presence_penalty: float
    frequency_penalty: float
    user: str
    include_usage: bool
    extra_json: str
    response_compression: Compression
    lz4_request: bytes
    def __init__(self, model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., max_completion_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., n: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., user: _Optional[str] = ..., include_usage: _Optional[bool] = ..., extra_json: _Optional[str] = ..., response_compression: _Optional[_Union[Compression, str]] = ..., lz4_request: _Optional[bytes] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "completion_tokens", "total_tokens", "extra_json")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    extra_json: str
    def __init__(self, prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ..., extra_json: _Optional[str] = ...) -> None: ...

class AssistantMessage(_message.Message):
    __slots__ = ("role", "content", "extra_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    extra_json: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class Choice(_message.Message):
    __slots__ = ("index", "message", "finish_reason", "extra_json")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    index: int
    message: AssistantMessage
    finish_reason: str
    extra_json: str
    def __init__(self, index: _Optional[int] = ..., message: _Optional[_Union[AssistantMessage, _Mapping]] = ..., finish_reason: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class ChatCompletion(_message.Message):
    __slots__ = ("id", "created", "model", "choices", "usage", "system_fingerprint", "extra_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    created: int
    model: str
    choices: _containers.RepeatedCompositeFieldContainer[Choice]
    usage: Usage
    system_fingerprint: str
    extra_json: str
    def __init__(self, id: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., choices: _Optional[_Iterable[_Union[Choice, _Mapping]]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., system_fingerprint: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class Route(_message.Message):
    __slots__ = ("request_id", "model", "endpoint", "route", "attempts", "intent", "cache", "fallback", "workflow", "confidence", "verifier")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    endpoint: str
    route: str
    attempts: str
    intent: str
    cache: str
    fallback: str
    workflow: str
    confidence: float
    verifier: str
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., endpoint: _Optional[str] = ..., route: _Optional[str] = ..., attempts: _Optional[str] = ..., intent: _Optional[str] = ..., cache: _Optional[str] = ..., fallback: _Optional[str] = ..., workflow: _Optional[str] = ..., confidence: _Optional[float] = ..., verifier: _Optional[str] = ...) -> None: ...

class ChatCompletionResponse(_message.Message):
    __slots__ = ("completion", "lz4_completion", "route")
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    LZ4_COMPLETION_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    completion: ChatCompletion
    lz4_completion: bytes
    route: Route
    def __init__(self, completion: _Optional[_Union[ChatCompletion, _Mapping]] = ..., lz4_completion: _Optional[bytes] = ..., route: _Optional[_Union[Route, _Mapping]] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("role", "content", "extra_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    extra_json: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class ChunkChoice(_message.Message):
    __slots__ = ("index", "delta", "finish_reason", "extra_json")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    index: int
    delta: Delta
    finish_reason: str
    extra_json: str
    def __init__(self, index: _Optional[int] = ..., delta: _Optional[_Union[Delta, _Mapping]] = ..., finish_reason: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class ChatCompletionChunk(_message.Message):
    __slots__ = ("id", "created", "model", "choices", "usage", "system_fingerprint", "extra_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_JSON_FIELD_NUMBER: _ClassVar[int]
    id: str
    created: int
    model: str
    choices: _containers.RepeatedCompositeFieldContainer[ChunkChoice]
    usage: Usage
    system_fingerprint: str
    extra_json: str
    def __init__(self, id: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., choices: _Optional[_Iterable[_Union[ChunkChoice, _Mapping]]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., system_fingerprint: _Optional[str] = ..., extra_json: _Optional[str] = ...) -> None: ...

class ChatCompletionStreamResponse(_message.Message):
    __slots__ = ("chunks", "lz4_chunks", "route")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    LZ4_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[ChatCompletionChunk]
    lz4_chunks: bytes
    route: Route
    def __init__(self, chunks: _Optional[_Iterable[_Union[ChatCompletionChunk, _Mapping]]] = ..., lz4_chunks: _Optional[bytes] = ..., route: _Optional[_Union[Route, _Mapping]] = ...) -> None: ...
