"""The config schema follows the registries: a registered loss term's section and a base loss of
zsdr.training.base_losses are accepted with no schema edit (zsdr.workflow.config_schema), an unknown
section or key is still refused naming the nearest valid one, and the sections the schema file writes out
agree with the terms' dataclasses."""

from pathlib import Path

import pytest
import yaml

from zsdr.training import term_registry
from zsdr.training.loss_registry import LOSSES
from zsdr.training.term_registry import TERMS
from zsdr.training.term_sections import TermSourceError, section_schema
from zsdr.workflow import ConfigError, check_config, config_schema, expand_recipes, read_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "schemas" / "config.schema.yaml"

TOY = '''"""A toy term, registered only by this test."""
from dataclasses import dataclass

from zsdr.training.terms import AdditiveTerm


@dataclass
class ToyConfig:
    weight: float = 0.5        # how much the toy loss counts
    mode: str = "plain"
    every: int | None = None


class ToyTerm(AdditiveTerm):
    name = "toy"
    config_class = ToyConfig
    summary = "a toy penalty"

    def loss_of(self, encoded, data):
        raise NotImplementedError
'''


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    """A term `toy` in a module of its own, registered by its one line in TERMS and nothing else."""
    (tmp_path / "toy_term.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(term_registry.TERMS, "toy", "toy_term:ToyTerm")
    return "toy"


def mini_config(**dpr) -> dict:
    config = read_config(ROOT)
    config["recipes"]["dpr"].update(dpr)
    expand_recipes(config)
    return config


def test_a_registered_terms_section_needs_no_schema_edit(toy):
    check_config(mini_config(toy={"weight": 2, "every": None}), SCHEMA)
    section = config_schema(SCHEMA)["properties"]["recipes"]["additionalProperties"]["properties"]["toy"]
    assert section["properties"] == {
        "weight": {"type": "number", "default": 0.5, "description": "how much the toy loss counts"},
        "mode": {"type": "string", "default": "plain"},
        "every": {"type": ["integer", "null"], "default": None}}
    assert section["additionalProperties"] is False and "a toy penalty" in section["description"]


def test_an_unknown_key_of_a_registered_section_names_the_nearest(toy):
    with pytest.raises(ConfigError) as err:
        check_config(mini_config(toy={"wieght": 2}), SCHEMA)
    assert ("config key recipes.dpr.toy.wieght: unknown key (did you mean 'weight'? allowed at recipes.dpr.toy: "
            "every, mode, weight)") in str(err.value)
    with pytest.raises(ConfigError, match=r"config key recipes.dpr.toy.weight: 'x' is not of type 'number'"):
        check_config(mini_config(toy={"weight": "x"}), SCHEMA)


def test_a_boolean_given_as_text_names_the_command_line_spelling():
    """Snakemake's --config reads `warm_start=false` as the text 'false': the line says how to write it."""
    config = mini_config()
    with pytest.raises(ConfigError) as err:
        check_config({**config, "warm_start": "false"}, SCHEMA)
    assert ("config key warm_start: 'false' is not of type 'boolean' (fix: on the command line, --config "
            "warm_start=False; in a YAML file, warm_start: false)") in str(err.value)
    check_config({**config, "warm_start": False}, SCHEMA)


def test_an_unregistered_section_is_still_an_unknown_key(toy):
    with pytest.raises(ConfigError, match=r"config key recipes.dpr.tyo: unknown key \(did you mean 'toy'\?"):
        check_config(mini_config(tyo={"weight": 2}), SCHEMA)
    del term_registry.TERMS["toy"]
    with pytest.raises(ConfigError, match=r"config key recipes.dpr.toy: unknown key"):
        check_config(mini_config(toy={"weight": 2}), SCHEMA)


def test_a_term_without_a_readable_section_is_named(tmp_path, monkeypatch):
    (tmp_path / "bad_term.py").write_text("class BadTerm:\n    name = 'bad'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TermSourceError, match=r"loss term 'bad' \(bad_term:BadTerm\): .*config_class"):
        section_schema("bad", "bad_term:BadTerm")
    monkeypatch.setitem(term_registry.TERMS, "bad", "bad_term:BadTerm")
    with pytest.raises(ConfigError, match=r"loss term 'bad' .*fix: the line of zsdr.training.term_registry.TERMS"):
        config_schema(SCHEMA)


def test_the_schema_files_term_sections_agree_with_the_terms():
    """A section the schema file writes out (for its descriptions) names only keys of its term's dataclass,
    and its defaults are written there only: the dataclass gives none of them (the workflow fills them into
    every spec); the test names the term and key that disagree."""
    written = yaml.safe_load(SCHEMA.read_text())["properties"]["recipes"]["additionalProperties"]["properties"]
    for name in TERMS:
        derived = section_schema(name)["properties"]
        own = written.get(name)
        if own is None:
            continue
        assert own.get("additionalProperties") is False, f"recipes.<name>.{name}: allows any key"
        for key, node in own["properties"].items():
            assert key in derived, f"term {name}: the schema's key {key!r} is no field of its config_class"
            if "default" in node:
                assert "default" not in derived[key], (
                    f"term {name}: the default of {key!r} is written twice, {node['default']!r} in the schema "
                    f"and {derived[key]['default']!r} in its dataclass (leave the dataclass's field without one)")


def test_the_schema_offers_exactly_the_registered_losses(monkeypatch):
    recipe = config_schema(SCHEMA)["properties"]["recipes"]["additionalProperties"]["properties"]
    assert recipe["loss"]["enum"] == list(LOSSES)
    # a new base loss (a module of zsdr.training.base_losses, found by the registry) needs no schema edit
    from zsdr.training.loss_registry import LossInfo

    monkeypatch.setitem(LOSSES, "hinge", LossInfo("hinge", "zsdr.training.base_losses.hinge:Hinge", "hinge", False))
    check_config(mini_config(loss="hinge"), SCHEMA)
    monkeypatch.delitem(LOSSES, "hinge")
    with pytest.raises(ConfigError, match=r"config key recipes.dpr.loss: 'hinge' is not one of"):
        check_config(mini_config(loss="hinge"), SCHEMA)
