"""The conventions every API model follows, in one place.

camelCase on the wire and snake_case in Python (aliases, either accepted on input);
serialized with ``by_alias`` and without ``None`` so that an absent field stays absent
(the API server treats absent and null differently). Field docstrings become the
descriptions ``kubectl explain`` shows (:mod:`berth.api.docstrings`), so they are written
for users.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Final, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, PlainSerializer
from pydantic.alias_generators import to_camel

__all__ = [
    "SERVER_DEFAULT",
    "SERVER_DEFAULT_OBJECT",
    "ApiModel",
    "OpenModel",
    "Time",
    "format_time",
]

SERVER_DEFAULT_KEY: Final = "x-berth-server-default"
SERVER_DEFAULT: Final[dict[str, Any]] = {SERVER_DEFAULT_KEY: True}
"""``json_schema_extra`` for a field whose model default the API server also applies.

Only fields marked so get a ``default`` in the CRD; other model defaults are Python
conveniences and must not be written into stored objects.
"""
SERVER_DEFAULT_OBJECT: Final[dict[str, Any]] = {SERVER_DEFAULT_KEY: True, "default": {}}
"""As :data:`SERVER_DEFAULT` for an object: the server adds ``{}`` and then its nested defaults."""


class ApiModel(BaseModel):
    """Base of all API shapes: aliases, lenient about unknown input, wire-form output."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="ignore",
    )

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, no ``None`` values, JSON-compatible values."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Parse the wire form (a dict from the API or from YAML)."""
        return cls.model_validate(data)


class OpenModel(ApiModel):
    """A partial model of a Kubernetes shape that keeps every field it does not know.

    Used for pod templates: Berth reads only scheduling-relevant fields but must hand the
    user's template back untouched. The CRD marks these nodes
    ``x-kubernetes-preserve-unknown-fields``.
    """

    model_config = ConfigDict(extra="allow")


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def epoch_seconds(value: Any) -> float | None:
    """An RFC 3339 time from an object (``2024-01-01T00:00:00Z``) as epoch seconds; None
    when it is absent or unreadable."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with second precision, as ``metav1.Time`` is written."""
    return _as_utc(value).strftime("%Y-%m-%dT%H:%M:%SZ")


Time = Annotated[datetime, AfterValidator(_as_utc), PlainSerializer(format_time, return_type=str)]
"""A ``metav1.Time``: timezone-aware UTC in Python, ``2024-05-01T12:00:00Z`` on the wire."""
