"""Building a named tuple without running its `__new__`.

A named tuple's generated `__new__` is Python code, interpreted on every construction even when the
caller is compiled (docs/hot-path.md). `new_tuple(Type, (every field, in order))` builds the same
object from C for about half the instructions. Used for the tuples built on every request, where each
call site writes every field out; anywhere else, call the type."""

from __future__ import annotations

new_tuple = tuple.__new__
