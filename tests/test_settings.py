"""zsdr.models.settings.resolve_settings: every source of a loaded encoder's settings, and every pair's precedence."""

from __future__ import annotations

import itertools

import pytest

from zsdr.io import DataError
from zsdr.models.settings import SOURCES, EncoderConfig, normalise_overrides, resolve_settings

# Every source saying its own query length; "default" says nothing (EncoderConfig's 64 stands).
LENGTHS = {"sentence-transformers": 11, "export": 12, "zsdr.json": 13, "zsdr.json retrieval": 14, "rem": 15,
           "override": 16}
# pooling and similarity from a source no pair below is about
BASE = {"pooling": "mean", "similarity": "cosine"}


def _sources(present: tuple[str, ...]) -> dict:
    """resolve_settings' keyword arguments with the ``present`` sources each setting its query length."""
    kwargs: dict = {"overrides": dict(BASE)}
    if "sentence-transformers" in present:
        kwargs["st"] = {"query_max_length": LENGTHS["sentence-transformers"]}
    if "export" in present:
        kwargs["export"] = {"query_max_length": LENGTHS["export"]}
    if "zsdr.json" in present or "zsdr.json retrieval" in present:
        kwargs["saved"] = {"version": 1, "backbone": "x"}
        if "zsdr.json" in present:
            kwargs["saved"]["query_max_length"] = LENGTHS["zsdr.json"]
        if "zsdr.json retrieval" in present:
            kwargs["saved"]["retrieval"] = {"query_max_length": LENGTHS["zsdr.json retrieval"]}
    if "rem" in present:
        kwargs["rem"] = {"query_max_length": LENGTHS["rem"]}
    if "override" in present:
        kwargs["overrides"]["query_max_length"] = LENGTHS["override"]
    return kwargs


@pytest.mark.parametrize("source", SOURCES)
def test_each_source_alone(source):
    got = resolve_settings("m", **_sources((source,)))
    want = 64 if source == "default" else LENGTHS[source]
    assert got.config.query_max_length == want
    assert got.sources["query_max_length"] == source
    assert got.config.doc_max_length == 256 and got.sources["doc_max_length"] == "default"


@pytest.mark.parametrize("low, high", list(itertools.combinations(SOURCES, 2)))
def test_the_higher_source_of_every_pair_wins(low, high):
    got = resolve_settings("m", **_sources((low, high)))
    assert got.config.query_max_length == LENGTHS[high], (low, high)
    assert got.sources["query_max_length"] == high


def test_sentence_transformers_metadata_only_without_zsdr_json_or_export_metadata():
    # a zsdr folder's sentence-transformers files are derived from its zsdr.json (and may hold modules
    # only sentence-transformers reads): a key zsdr.json lacks is not taken from them
    st = {"pooling": "cls", "similarity": "dot", "doc_max_length": 99}
    saved = {"pooling": "mean", "similarity": "cosine"}
    assert resolve_settings("m", st=st, saved=saved).config.doc_max_length == 256
    assert resolve_settings("m", st=st, export=saved).config.doc_max_length == 256
    assert resolve_settings("m", st=st).config.doc_max_length == 99


def test_export_metadata_only_without_zsdr_json():
    got = resolve_settings("m", export={"pooling": "cls", "similarity": "dot", "doc_max_length": 77},
                           saved={"pooling": "mean", "similarity": "cosine"})
    assert got.config.pooling == "mean" and got.config.doc_max_length == 256


def test_retrieval_false_keeps_the_training_settings_and_ignores_the_rem():
    saved = {**BASE, "query_max_length": 13, "retrieval": {"query_max_length": 14}}
    got = resolve_settings("m", saved=saved, rem={"query_max_length": 15}, retrieval=False)
    assert got.config.query_max_length == 13
    assert got.retrieval == {"query_max_length": 14}  # kept, and saved again
    assert got.trained == {}


def test_trained_values_are_those_the_applied_retrieval_settings_replaced():
    saved = {**BASE, "doc_max_length": 128, "retrieval": {"doc_max_length": 512}}
    got = resolve_settings("m", saved=saved)
    assert got.config.doc_max_length == 512 and got.trained == {"doc_max_length": 128}
    # an explicit override makes the loaded settings no longer the model's own: nothing to restore
    assert resolve_settings("m", saved=saved, overrides={"query_max_length": 20}).trained == {}


def test_pooling_and_similarity_are_never_guessed():
    with pytest.raises(DataError, match="pooling and similarity would be a guess") as info:
        resolve_settings("some/model")
    assert "some/model" in str(info.value)
    with pytest.raises(DataError, match="similarity would be a guess"):
        resolve_settings("m", overrides={"pooling": "cls"})
    assert resolve_settings("m", st={"pooling": "cls", "similarity": "dot"}).config.pooling == "cls"


def test_the_result_is_validated():
    with pytest.raises(ValueError, match="unknown pooling"):
        resolve_settings("m", overrides={"pooling": "max", "similarity": "dot"})


def test_the_sources_are_not_changed():
    saved = {**BASE, "retrieval": {"doc_max_length": 512}}
    overrides = {"query_max_length": 20}
    before = (repr(saved), repr(overrides))
    resolve_settings("m", saved=saved, overrides=overrides, rem={"doc_max_length": 300})
    assert (repr(saved), repr(overrides)) == before


def test_normalise_overrides():
    assert normalise_overrides({"max_length": 32, "doc_max_length": 300, "pooling": None}) == {
        "query_max_length": 32, "doc_max_length": 300}
    with pytest.raises(TypeError, match="unknown encoder settings"):
        normalise_overrides({"poolin": "cls"})
    assert set(SOURCES) >= {"default", "override"} and "pooling" in EncoderConfig.field_names()
