"""Configs: YAML + CLI overrides, validated all at once, hashed without operational fields."""

from __future__ import annotations

import pytest
from pydantic import Field

from trajkit.config import StageConfig, Unhashed, build, config_hash, read_yaml
from trajkit.errors import UserError


class Inner(StageConfig):
    temperature: float = 1.0


class Example(StageConfig):
    k: int = 4
    name: str
    inner: Inner = Inner()
    concurrency: Unhashed[int] = Field(8)


def test_yaml_then_options_then_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("k: 2\nname: a\ninner: {temperature: 0.5}\n")
    cfg = build(Example, read_yaml(f), {"name": "b", "k": None}, overrides=["inner.temperature=0.7", "k=9"])
    assert (cfg.k, cfg.name, cfg.inner.temperature) == (9, "b", 0.7)


def test_every_error_reported_at_once_in_one_line():
    with pytest.raises(UserError) as e:
        build(Example, {"k": "many", "inner": {"temperature": "hot"}, "extra_key": 1})
    msg = str(e.value)
    assert "\n" not in msg and "4 errors" in msg
    for part in (
        "k: Input should be a valid integer",
        "name: Field required",
        "inner.temperature",
        "extra_key: Extra inputs are not permitted",
    ):
        assert part in msg


class Outer(StageConfig):
    models: list[Example] = Field(default_factory=list)
    one: Example | None = None


def test_hash_ignores_operational_fields_at_any_depth():
    a, b = Example(name="x", concurrency=1), Example(name="x", concurrency=64)
    assert config_hash(a) == config_hash(b) != config_hash(Example(name="x", k=5))
    assert config_hash(Outer(one=a, models=[a])) == config_hash(Outer(one=b, models=[b]))
    assert config_hash(Outer(models=[a])) != config_hash(Outer(models=[Example(name="y")]))


def test_bad_files_and_overrides_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="config file not found"):
        read_yaml(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(UserError, match="expected a mapping"):
        read_yaml(tmp_path / "list.yaml")
    with pytest.raises(UserError, match="not KEY=VALUE"):
        build(Example, {"name": "x"}, overrides=["oops"])


def test_every_stage_marks_its_unhashed_fields_with_the_one_marker():
    """``Unhashed`` is the one way out of the config hash: no field of a registered stage's config, at any depth,
    spells it another way (``json_schema_extra={"hash": False}``, which the hash does not read)."""
    from pydantic import BaseModel

    from trajkit.stages import REGISTRY, get_stage

    def spelled(model: type[BaseModel], seen: set[type]) -> list[str]:
        if model in seen:
            return []
        seen.add(model)
        out = []
        for name, field in model.model_fields.items():
            extra = field.json_schema_extra
            if isinstance(extra, dict) and "hash" in extra:
                out.append(f"{model.__name__}.{name}")
            for inner in _models(field.annotation):
                out += spelled(inner, seen)
        return out

    assert [f for kind in REGISTRY for f in spelled(get_stage(kind).config, set())] == []


def _models(annotation: object) -> list[type]:
    """The pydantic models an annotation holds (``list[Spec] | None`` -> ``[Spec]``)."""
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def test_a_nested_field_of_an_unset_model_can_be_set_alone():
    """``--set user_model.cache=false`` failed unless the whole user model was given (issue 34 item 4)."""
    from trajkit.synth.extend import ExtendConfig

    agent = {"model": "m", "backend": "openai", "base_url": "http://127.0.0.1:1/v1"}
    cfg = build(ExtendConfig, {"model": agent}, overrides=["user_model.cache=false"])
    assert (cfg.user_model.model, cfg.user_model.base_url, cfg.user_model.cache) == ("m", agent["base_url"], False)
    assert cfg.model.cache and build(ExtendConfig, {"model": agent}).user_model is None
    other = build(ExtendConfig, {"model": agent}, overrides=["user_model.model=u", "user_model.backend=openai"])
    assert (other.user_model.model, other.user_model.base_url) == ("u", None)


def test_a_null_in_a_file_is_null_and_an_option_not_given_is_not():
    """``split: null`` in a pipeline file became the default split (held_out): a null was taken for "not given"."""
    from trajkit.config import given_options
    from trajkit.eval.passk import EvalPasskConfig

    models = {"models": [{"model": "m", "backend": "openai"}]}
    assert build(EvalPasskConfig, models | {"split": None}).split is None
    assert build(EvalPasskConfig, models, given_options({"split": None, "n": 12})).split == "held_out"
