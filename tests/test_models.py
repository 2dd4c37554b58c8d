"""``client.models.list``: a lazy iterator of the models the organization may use."""

from __future__ import annotations

import pytest

from _helpers import ENCODER, REASONER, calls
from sensorium import Model, SyncPager
from sensorium.errors import BadRequestError, InvalidArgumentError


def test_lists_both_families(emu, client):
    pager = client.models.list()
    assert isinstance(pager, SyncPager)
    assert calls(emu, "/models") == []  # lazy: nothing fetched yet
    models = list(pager)
    assert all(isinstance(m, Model) for m in models)
    ids = {m.id for m in models}
    assert {REASONER, ENCODER} <= ids
    by_id = {m.id: m for m in models}
    assert by_id[ENCODER].model_family == "Encoder"
    assert by_id[REASONER].model_family == "Reasoner"
    assert by_id[ENCODER].to_dict()["id"] == ENCODER
    assert len(calls(emu, "/models")) >= 1


def test_filter_by_family(emu, client):
    # The family in either spelling; each record keeps its id's own prefix.
    models = list(client.models.list(model_family="Encoder"))
    assert models and {m.model_family for m in models} == {"Encoder", "OmegaEncoder"}
    assert ENCODER in {m.id for m in models}
    assert "model_family=Encoder" in calls(emu, "/models")[-1].query


def test_search_is_case_insensitive(client):
    ids = {m.id for m in client.models.list(search="ENCODER_EMB")}
    assert ENCODER in ids and REASONER not in ids


def test_search_without_match_is_empty(client):
    assert list(client.models.list(search="no-such-model-anywhere")) == []


@pytest.mark.parametrize("scope", ["platform", "org", "all"])
def test_scopes_are_accepted(emu, client, scope):
    list(client.models.list(scope=scope))
    assert f"scope={scope}" in calls(emu, "/models")[-1].query


def test_platform_models_are_in_scope_all(client):
    platform = {m.id for m in client.models.list(scope="platform")}
    everything = {m.id for m in client.models.list(scope="all")}
    assert platform <= everything and REASONER in platform


def test_bad_scope_is_rejected_before_sending(emu, client):
    with pytest.raises(InvalidArgumentError, match="scope"):
        list(client.models.list(scope="universe"))
    assert calls(emu, "/models") == []


def test_unknown_family_is_a_bad_request(emu, client):
    with pytest.raises(BadRequestError) as info:
        list(client.models.list(model_family="Teleporter"))
    assert info.value.status == 400
    assert len(calls(emu, "/models")) == 1


def test_listed_ids_are_usable(client):
    reasoner = next(m for m in client.models.list(model_family="Reasoner"))
    assert client.query(reasoner.id, "hello").status == "completed"
