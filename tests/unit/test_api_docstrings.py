"""Field descriptions come from attribute docstrings when a schema is written, exactly as
pydantic's own docstring reading gave them, without its cost at import."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from berth.api.base import ApiModel
from berth.api.crdgen import openapi_schema
from berth.api.docstrings import DocumentedSchema, field_docstrings
from berth.api.reservation import Reservation


class _Parent(ApiModel):
    kept: int = 0
    """From the parent."""
    redeclared: int = 0
    """The parent's, hidden by the child's declaration."""


class _Child(_Parent):
    redeclared: int = 1
    own_name: str = ""
    """A child's field,
    on two lines."""
    explicit: str = Field("", description="Given in Field.")
    """Not this one."""
    plain: int = 0


def test_a_field_has_the_docstring_of_the_nearest_class_declaring_it() -> None:
    assert field_docstrings(_Child) == {
        "kept": "From the parent.",
        "own_name": "A child's field,\non two lines.",
        "explicit": "Not this one.",
    }


def test_the_schema_describes_fields_by_their_wire_names_and_field_descriptions_win() -> None:
    properties = _Child.model_json_schema(
        by_alias=True, mode="validation", schema_generator=DocumentedSchema
    )["properties"]
    assert properties["kept"]["description"] == "From the parent."
    assert properties["ownName"]["description"] == "A child's field,\non two lines."
    assert properties["explicit"]["description"] == "Given in Field."
    assert "description" not in properties["redeclared"]
    assert "description" not in properties["plain"]


def test_the_same_descriptions_as_pydantic_reading_docstrings_itself() -> None:
    class Reference(BaseModel):
        model_config = ConfigDict(use_attribute_docstrings=True)
        kept: int = 0
        """From the parent."""
        explicit: str = Field("", description="Given in Field.")
        """Not this one."""

    class Ours(BaseModel):
        kept: int = 0
        """From the parent."""
        explicit: str = Field("", description="Given in Field.")
        """Not this one."""

    assert (
        Ours.model_json_schema(schema_generator=DocumentedSchema)["properties"]
        == Reference.model_json_schema()["properties"]
    )


def test_models_are_made_without_reading_their_source() -> None:
    """The cost this avoids: descriptions are absent until a schema is written."""
    assert Reservation.model_fields["spec"].description is None
    spec = openapi_schema(Reservation)["properties"]["spec"]
    assert spec["properties"]["ttl"]["description"]
