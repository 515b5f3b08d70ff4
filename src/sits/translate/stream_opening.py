"""A source's role event, learnt once and read by its bytes afterwards (for `translate/chat_stream.py`).

A model server writes the first event of every stream (the role event) alike but for two values, the
stream's id and its `created` time. Once the chat reader parsed one that foretold the text events'
shape, `learn` keeps its bytes around those two values, and the shape's templates split at the same
values (`Opening`, per source, bounded). A later stream's role event of the same bytes around another id
(printable ASCII without quote or backslash) and another integer (no leading zero, within 64 bits) is
the same JSON object but for those two values (`values`): it says what the first one said, and its shape
is the first one's with its own values in (`fill_in`).

A changed layout is learnt at its first miss; a source whose role events differ in another field too,
changing per stream, is learnt again only every `RELEARN_EVERY` misses in a row: learning costs about
twice the role event's parse (`python -m research.opening_cost`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:
    from sits.translate.chat_delta import ChatDelta

ID_KEY: Final = b'"id":"'
CREATED_KEY: Final = b'"created":'
_MAX_DIGITS: Final = 18  # within 64 bits
_MAX_OPENINGS: Final = 1024  # sources remembered; past that the memo starts again
RELEARN_EVERY: Final = 64


def only_table(allowed: bytes) -> bytes:
    """A `translate` table that keeps the `allowed` bytes and changes every other one: a value is made of
    allowed bytes exactly when translating leaves it as it is (`translate` is a compiled primitive, one
    pass in C; `isdigit` or a regular expression is a method call by name)."""
    return bytes(n if n in allowed else (n + 1) % 256 for n in range(256))


_ID_TABLE: Final = only_table(bytes(range(0x21, 0x7F)).replace(b'"', b"").replace(b"\\", b""))
_DIGITS_TABLE: Final = only_table(b"0123456789")

# A learnt template of the shape: its bytes around the opening's values (`_template`); which values it
# holds: 0 none, 1 the first, 2 the second, 3 both (in the role event's order)
Template = tuple[tuple[bytes, ...], int]


class Opening(NamedTuple):
    """A source's role event learnt from a stream: its bytes around the stream's two own values (the id's
    text and the `created` number, in the order written), what reading it said, and the shape it
    foretold, each template split at the same two values."""

    first: bytes  # the event's bytes up to the first value
    middle: bytes  # between the two values
    last: bytes  # after the second value
    id_first: bool  # the id is the first value, `created` the second
    created_length: int  # how many digits `created` had (the same from stream to stream, mostly)
    delta: ChatDelta  # what the role event says
    templates: tuple[Template, ...]  # the shape's bytes, in the order `learn` was given them
    model: str | None
    stop: str | None
    usage_model: str | None


# source -> its opening: wire-format knowledge, like a compiled pattern's cache (bounded)
OPENINGS: Final[dict[str, Opening]] = {}
# source -> role events in a row that foretold the shape but missed its opening
MISSES: Final[dict[str, int]] = {}


def _plain_id(value: bytes) -> bool:
    return len(value) > 0 and value.translate(_ID_TABLE) == value


def _integer(value: bytes) -> bool:
    return 0 < len(value) <= _MAX_DIGITS and value.translate(_DIGITS_TABLE) == value \
        and (value[0] != 48 or len(value) == 1)  # no leading zero


def values(event: bytes, opening: Opening) -> tuple[bytes, bytes] | None:
    """The stream's own two values (in the opening's order) when `event` is the opening's bytes around
    them, else None. A hit ends the source's run of misses."""
    first, middle, last = opening.first, opening.middle, opening.last
    if not event.startswith(first) or not event.endswith(last):
        return None
    start, end = len(first), len(event) - len(last)
    id_first = opening.id_first
    # where the middle is when `created` has as many digits as before; else searched for
    split = end - len(middle) - opening.created_length if id_first else start + opening.created_length
    if split < start or event[split:split + len(middle)] != middle:
        split = event.find(middle, start)
        if split < 0:
            return None
    one, two = event[start:split], event[split + len(middle):end]
    if not (_plain_id(one) and _integer(two) if id_first else _integer(one) and _plain_id(two)):
        return None
    return one, two


def hit(source: str) -> None:
    """The source's role event was read by its opening: its run of misses ends."""
    if MISSES:
        MISSES.pop(source, None)


def fill_in(template: Template, first: bytes, second: bytes) -> bytes:
    """A learnt template with a stream's own two values in."""
    pieces, holds = template
    if holds == 3:  # literal formats: one allocation each (docs/hot-path.md)
        return b"%b%b%b%b%b" % (pieces[0], first, pieces[1], second, pieces[2])
    if holds == 1:
        return b"%b%b%b" % (pieces[0], first, pieces[1])
    if holds == 2:
        return b"%b%b%b" % (pieces[0], second, pieces[1])
    return pieces[0]


def _template(learnt: bytes, first: tuple[bytes, bytes, bytes], second: tuple[bytes, bytes, bytes]
              ) -> Template | None:
    """`learnt` split at the two values, each given as (its bytes with its key and closing quote, the
    bytes before the value, the bytes after it); None when a value is in it more than once."""
    around_first = learnt.split(first[0])
    if len(around_first) > 2:
        return None
    pieces: list[bytes] = []
    holds = 0
    rest = learnt
    if len(around_first) == 2:
        pieces.append(around_first[0] + first[1])
        rest = first[2] + around_first[1]
        holds = 1
    around_second = rest.split(second[0])
    if len(around_second) > 2:
        return None
    if len(around_second) == 2:
        pieces.append(around_second[0] + second[1])
        pieces.append(second[2] + around_second[1])
        holds |= 2
    else:
        pieces.append(rest)
    return tuple(pieces), holds


def learn(source: str, event: bytes, parsed: dict[str, Any], delta: ChatDelta, shape: tuple[bytes, ...],
          model: str | None, stop: str | None, usage_model: str | None) -> None:
    """Keep `event` (a role event that foretold `shape`, what `delta` says) as the source's opening, when
    its id and `created` are written once each, plainly; after a miss, only as the rule above says."""
    if source in OPENINGS:  # it missed the opening this source has
        misses = MISSES[source] = MISSES.get(source, 0) + 1
        if misses != 1 and misses % RELEARN_EVERY != 0:
            return
    stream_id, created = parsed.get("id"), parsed.get("created")
    if type(stream_id) is not str or type(created) is not int or created < 0:
        return
    id_bytes, created_bytes = stream_id.encode(), str(created).encode()
    if not _plain_id(id_bytes) or not _integer(created_bytes) or event.count(ID_KEY) != 1 \
            or event.count(CREATED_KEY) != 1:
        return
    id_value = (ID_KEY + id_bytes + b'"', ID_KEY, b'"')
    created_value = (CREATED_KEY + created_bytes, CREATED_KEY, b"")
    at_id, at_created = event.find(id_value[0]), event.find(created_value[0])
    if at_id < 0 or at_created < 0:
        return
    id_first = at_id < at_created
    if not id_first:
        id_value, created_value = created_value, id_value
    split = _template(event, id_value, created_value)
    learnt = [_template(t, id_value, created_value) for t in shape]
    templates = tuple(t for t in learnt if t is not None)
    if split is None or split[1] != 3 or len(templates) != len(learnt):
        return
    if len(OPENINGS) >= _MAX_OPENINGS:
        OPENINGS.clear()
        MISSES.clear()
    pieces = split[0]
    OPENINGS[source] = Opening(pieces[0], pieces[1], pieces[2], id_first, len(created_bytes), delta, templates,
                               model, stop, usage_model)
