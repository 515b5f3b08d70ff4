"""Validating a request body at the edge: a JSON body against its schema, and pydantic's first error as
the client's error naming the field. Compiled with the request path (docs/hot-path.md); the schemas
themselves are in `api/schemas.py`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from sits.api.body_fields import NO_NEEDS
from sits.errors import ClientError, InvalidRequest, UnprocessableRequest

T = TypeVar("T", bound=BaseModel)
B = TypeVar("B", bound=Mapping[str, Any])
V = TypeVar("V")


class BodySchema(Generic[B]):
    """A data-plane body validated into a plain dict (typed by a TypedDict).

    Plain dicts rather than pydantic models: the gateway reads a few keys, and building a model instance
    costs more on every request (figures: bench/README.md, "measured")."""

    def __init__(self, typed: type[B], prompt_text: Callable[[B], str],
                 needs: Callable[[B], frozenset[str]] = lambda body: NO_NEEDS) -> None:
        adapter: TypeAdapter[B] = TypeAdapter(typed)
        # pydantic-core's validator itself: the adapter's validate_json is a Python wrapper around it
        self._validate_json: Callable[[bytes], B] = adapter.validator.validate_json
        self.known = typed.__required_keys__ | typed.__optional_keys__  # type: ignore[attr-defined]
        self._required = len(typed.__required_keys__)  # type: ignore[attr-defined]
        self.prompt_text = prompt_text
        self.needs = needs  # what the request needs of a model (the scheduler's capability filter)

    def parse(self, body: bytes) -> B:
        """Validate a JSON body; raise a ClientError naming the first offending field."""
        return _validated(self._validate_json, body)

    def unknown_fields(self, body: Mapping[str, Any]) -> list[str]:
        """Fields SITS does not declare (forwarded unchanged)."""
        # A valid body with no more fields than the required ones has only those.
        return [name for name in body if name not in self.known] if len(body) > self._required else []


def parse_body(schema: type[T], body: bytes) -> T:
    """Validate a JSON body against a pydantic model; raise a ClientError naming the first offending field."""
    return _validated(schema.model_validate_json, body)


def _validated(validate: Callable[[bytes], V], body: bytes) -> V:
    if not body:
        raise InvalidRequest("request body is empty; expected a JSON object", param="body")
    try:
        return validate(body)
    except ValidationError as exc:
        raise client_error(exc) from None


def client_error(exc: ValidationError) -> ClientError:
    """pydantic's first error as the client's: 400 for a body that is not a JSON object, else 422."""
    first = exc.errors(include_url=False)[0]
    kind, loc, msg = first["type"], first["loc"], first["msg"]
    if kind == "json_invalid":
        return InvalidRequest(f"request body is not valid JSON: {first.get('ctx', {}).get('error', msg)}",
                              param="body", code="invalid_json")
    if not loc and kind in ("model_type", "model_attributes_type", "dataclass_type", "dict_type"):
        return InvalidRequest("request body must be a JSON object", param="body", code="invalid_json")
    if not loc:
        return UnprocessableRequest(str(msg).removeprefix("Value error, "), param=None, code="invalid_value")
    param = _param_path(loc)
    if kind == "extra_forbidden":
        return UnprocessableRequest(f"unknown field '{param}'", param=param, code="unknown_parameter")
    if kind == "missing":
        return UnprocessableRequest(f"missing required field '{param}'", param=param, code="missing_required_parameter")
    return UnprocessableRequest(f"invalid value for '{param}': {msg}", param=param, code="invalid_type")


def _param_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "list[dict[str,any]]", "list[int]", "list[str]", "list[list[int]]", "int", "float",
                      "function-after[str]") or "[" in part or part.startswith("constrained"):
            continue  # union-branch labels pydantic inserts: not a field name
        else:
            path += f".{part}" if path else part
    return path
