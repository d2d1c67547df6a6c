"""A tool's input schema, checked against a model's arguments in linear time.

The schema comes from a server, which may be hostile: a ``pattern`` that backtracks (``^(a+)+$`` against
``"a" * 30 + "!"`` takes Python's ``re`` minutes, holding the GIL and with it the event loop of every
trajectory in the process). So the keywords that run a regular expression (``pattern``,
``patternProperties``, and ``additionalProperties``, which reads the latter's patterns) search with RE2
(Arrow's ``match_substring_regex``), whose time is linear in the text whatever the pattern. A pattern RE2
cannot read (a backreference, a lookaround) makes the schema unusable: ``PatternError``, and the caller
accepts the call, as for any schema that is not JSON Schema (the tool's fault, not the model's).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any


class PatternError(ValueError):
    """A schema pattern RE2 does not read."""


@functools.lru_cache(maxsize=4096)  # a schema's branches (anyOf, oneOf) test one value against one pattern again
def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text`` (JSON Schema's unanchored search), by RE2."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return bool(pc.match_substring_regex(pa.array([text], pa.string()), pattern)[0].as_py())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise PatternError(f"pattern {pattern!r}: {e}") from None


def linear(cls: type) -> type:
    """``cls`` (a jsonschema validator class) with its regular-expression keywords searching by RE2."""
    from jsonschema.validators import extend

    return extend(
        cls,
        {"pattern": _pattern, "patternProperties": _pattern_properties, "additionalProperties": _additional},
    )


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: dict, instance: Any, schema: dict) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(validator: Any, allowed: Any, instance: Any, schema: dict) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = sorted(k for k in instance if k not in properties and not any(search(p, k) for p in patterns))
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        yield ValidationError(f"Additional properties are not allowed ({', '.join(map(repr, extras))} unexpected)")
