"""Quantities and durations must mean exactly what Kubernetes makes of them."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from pydantic import BaseModel, ValidationError

from berth.api.duration import DURATION_PATTERN, Duration, parse_duration
from berth.api.quantity import (
    NON_NEGATIVE_QUANTITY_PATTERN,
    QUANTITY_PATTERN,
    Quantity,
    QuantityError,
    QuantityFormat,
    QuantityStr,
    ResourceList,
    SignedQuantity,
    canonical_quantity,
    format_quantity,
    milli_value,
    parse_quantity,
    parse_resource_list,
    quantity_format,
    value_ceil,
)

# (text, value, canonical text), as resource.ParseQuantity and Quantity.String() give them.
KUBERNETES_VALUES = [
    ("1500m", Decimal("1.5"), "1500m"),
    ("2Gi", Decimal(2147483648), "2Gi"),
    ("1e3", Decimal(1000), "1e3"),
    ("1E3", Decimal(1000), "1e3"),
    ("0.5", Decimal("0.5"), "500m"),
    (".5", Decimal("0.5"), "500m"),
    ("100M", Decimal(100_000_000), "100M"),
    ("1000", Decimal(1000), "1k"),
    ("1", Decimal(1), "1"),
    ("1.", Decimal(1), "1"),
    ("0", Decimal(0), "0"),
    ("0Mi", Decimal(0), "0"),
    ("1Ki", Decimal(1024), "1Ki"),
    ("1024Ki", Decimal(1048576), "1Mi"),
    ("1536Ki", Decimal(1572864), "1536Ki"),
    ("1.5Gi", Decimal(1610612736), "1536Mi"),
    ("0.5Ki", Decimal(512), "512"),
    ("1.1M", Decimal(1_100_000), "1100k"),
    ("1.5m", Decimal("0.0015"), "1500u"),
    ("100u", Decimal("0.0001"), "100u"),
    ("1n", Decimal("1e-9"), "1n"),
    ("12e-1", Decimal("1.2"), "1200e-3"),
    ("1E", Decimal(10**18), "1E"),
    ("1Ei", Decimal(2**60), "1Ei"),
    ("-1500m", Decimal("-1.5"), "-1500m"),
    ("+2", Decimal(2), "2"),
    # Below a nano unit rounds up (never to zero), away from zero for negatives.
    ("0.0000000001", Decimal("1e-9"), "1n"),
    ("1.0000000001", Decimal("1.000000001"), "1000000001n"),
    ("-0.0000000001", Decimal("-1e-9"), "-1n"),
    # Binary and exponent forms are capped at the int64 maximum; DecimalSI is not.
    ("8Ei", Decimal(2**63 - 1), "9223372036854775807"),
    ("1e19", Decimal(2**63 - 1), "9223372036854775807"),
    ("10E", Decimal(10**19), "10E"),
]


@pytest.mark.parametrize(("text", "value", "canonical"), KUBERNETES_VALUES)
def test_parse_and_canonical_form_match_kubernetes(
    text: str, value: Decimal, canonical: str
) -> None:
    assert parse_quantity(text) == value
    assert canonical_quantity(text) == canonical
    # The canonical form means the same value.
    assert parse_quantity(canonical) == value


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("2Gi", QuantityFormat.BINARY_SI),
        ("1e3", QuantityFormat.DECIMAL_EXPONENT),
        ("500m", QuantityFormat.DECIMAL_SI),
        ("3", QuantityFormat.DECIMAL_SI),
    ],
)
def test_format_follows_the_suffix(text: str, fmt: QuantityFormat) -> None:
    assert quantity_format(text) is fmt


MALFORMED = [
    "",
    "12xyz",
    "1K",  # kilo is a lower-case k
    "1.2.3",
    "e3",
    "1e",
    "1e1.5",  # exponents are integers
    " 1",
    "1 ",
    "--1",
    "+-1",
    "Mi",
    "+",
    "-",
    ".",
    "1 Gi",
    "1gi",
    "0x10",
    "1_000",
    "∞",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError, match="malformed"):
        parse_quantity(text)


@pytest.mark.parametrize("text", MALFORMED)
def test_crd_patterns_reject_what_the_parser_rejects(text: str) -> None:
    assert re.fullmatch(QUANTITY_PATTERN, text) is None
    assert re.fullmatch(NON_NEGATIVE_QUANTITY_PATTERN, text) is None


@pytest.mark.parametrize(("text", "value", "canonical"), KUBERNETES_VALUES)
def test_crd_patterns_accept_what_the_parser_accepts(
    text: str, value: Decimal, canonical: str
) -> None:
    assert re.fullmatch(QUANTITY_PATTERN, text)
    assert bool(re.fullmatch(NON_NEGATIVE_QUANTITY_PATTERN, text)) == (not text.startswith("-"))


def test_negative_rejected_only_when_asked() -> None:
    assert parse_quantity("-1") == -1
    with pytest.raises(QuantityError, match="negative"):
        parse_quantity("-1", non_negative=True)
    with pytest.raises(QuantityError, match="negative"):
        parse_quantity(-2, non_negative=True)
    assert parse_quantity("0", non_negative=True) == 0


@pytest.mark.parametrize(
    ("number", "value"),
    [(2, Decimal(2)), (1.5, Decimal("1.5")), (0.1, Decimal("0.1")), (1e-5, Decimal("0.00001"))],
)
def test_numbers_parse_like_their_yaml_text(number: float, value: Decimal) -> None:
    assert parse_quantity(number) == value


@pytest.mark.parametrize("bad", [True, float("nan"), float("inf"), None, [1]])
def test_non_quantities_are_rejected(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (Decimal("1.5"), QuantityFormat.DECIMAL_SI, "1500m"),
        (Decimal(2147483648), QuantityFormat.BINARY_SI, "2Gi"),
        (Decimal(1610612736), QuantityFormat.BINARY_SI, "1536Mi"),
        (Decimal(1000), QuantityFormat.BINARY_SI, "1k"),  # below 1024: shown as DecimalSI
        (Decimal("1536.5"), QuantityFormat.BINARY_SI, "1536500m"),  # fraction: DecimalSI
        (Decimal(4000), QuantityFormat.DECIMAL_EXPONENT, "4e3"),
        (Decimal(0), QuantityFormat.BINARY_SI, "0"),
        (Decimal("0.0000000001"), QuantityFormat.DECIMAL_SI, "1n"),
        (Decimal(-3 * 1024**3), QuantityFormat.BINARY_SI, "-3Gi"),
        (Decimal(10**21), QuantityFormat.DECIMAL_SI, "1000E"),
        (5, QuantityFormat.DECIMAL_SI, "5"),
    ],
)
def test_format_quantity(value: Decimal, fmt: QuantityFormat, text: str) -> None:
    assert format_quantity(value, fmt) == text


def test_milli_and_whole_values_round_up() -> None:
    assert milli_value("1.5") == 1500
    assert milli_value("250m") == 250
    assert milli_value("0.0001") == 1
    assert milli_value("2Gi") == 2147483648000
    assert value_ceil("1.5") == 2
    assert value_ceil("1Mi") == 1048576


class _Resources(BaseModel):
    requests: ResourceList
    one: Quantity | None = None
    delta: SignedQuantity | None = None


def test_quantity_type_accepts_what_users_write_and_keeps_their_text() -> None:
    parsed = _Resources.model_validate(
        {"requests": {"cpu": 1.5, "memory": "2Gi", "pods": 110, "gpu": "1e0"}}
    )
    assert parsed.requests == {"cpu": "1.5", "memory": "2Gi", "pods": "110", "gpu": "1e0"}
    assert all(type(q) is QuantityStr for q in parsed.requests.values())
    assert parsed.requests["memory"].value == 2147483648
    assert parsed.requests["cpu"].milli() == 1500
    assert parsed.requests["cpu"].canonical() == "1500m"
    assert parsed.requests["memory"].quantity_format is QuantityFormat.BINARY_SI
    dumped = parsed.model_dump(mode="json")
    assert dumped["requests"] == {"cpu": "1.5", "memory": "2Gi", "pods": "110", "gpu": "1e0"}
    # Python-mode dumps are plain strings too, so yaml.safe_dump can write them.
    assert type(parsed.model_dump()["requests"]["memory"]) is str


@pytest.mark.parametrize(
    "bad", ["-1", -1, "-500m", "12xyz", True, float("nan"), {"a": 1}, "1" * 65]
)
def test_quantity_type_rejects_negative_and_malformed(bad: object) -> None:
    with pytest.raises(ValidationError):
        _Resources.model_validate({"requests": {"cpu": bad}})


def test_signed_quantity_allows_negative() -> None:
    parsed = _Resources.model_validate({"requests": {}, "delta": "-250m"})
    assert parsed.delta is not None
    assert parsed.delta.value == Decimal("-0.25")


def test_quantity_json_schema_is_int_or_string_with_pattern() -> None:
    schema = _Resources.model_json_schema()
    one = schema["properties"]["requests"]["additionalProperties"]
    assert one["x-kubernetes-int-or-string"] is True
    assert one["pattern"] == NON_NEGATIVE_QUANTITY_PATTERN
    assert one["minimum"] == 0
    assert one["maxLength"] == 64


def test_parse_resource_list() -> None:
    assert parse_resource_list({"cpu": "500m", "memory": 1024}) == {
        "cpu": Decimal("0.5"),
        "memory": Decimal(1024),
    }
    assert parse_resource_list(None) == {}


# --- durations ---------------------------------------------------------------------------------

GO_DURATIONS = [
    ("24h", timedelta(hours=24)),
    ("0", timedelta(0)),
    ("0s", timedelta(0)),
    ("1h30m", timedelta(hours=1, minutes=30)),
    ("1.5h", timedelta(minutes=90)),
    ("90s", timedelta(seconds=90)),
    ("300ms", timedelta(milliseconds=300)),
    ("5m", timedelta(minutes=5)),
    ("2h45m30.5s", timedelta(hours=2, minutes=45, seconds=30.5)),
    ("1500us", timedelta(microseconds=1500)),
    ("1500µs", timedelta(microseconds=1500)),
    ("1500μs", timedelta(microseconds=1500)),
    ("2000ns", timedelta(microseconds=2)),
    (".5s", timedelta(milliseconds=500)),
]


@pytest.mark.parametrize(("text", "length"), GO_DURATIONS)
def test_go_durations(text: str, length: timedelta) -> None:
    assert parse_duration(text) == length
    assert re.fullmatch(DURATION_PATTERN, text)


@pytest.mark.parametrize("text", ["", "1", "24", "1d", "1 h", "-1h", "h", "1hh", "1.5.h", "24H"])
def test_malformed_durations(text: str) -> None:
    with pytest.raises(ValueError, match="malformed"):
        parse_duration(text)
    assert re.fullmatch(DURATION_PATTERN, text) is None


class _Policy(BaseModel):
    window: Duration


def test_duration_type_keeps_text() -> None:
    assert _Policy.model_validate({"window": "1h30m"}).window == "1h30m"
    with pytest.raises(ValidationError):
        _Policy.model_validate({"window": "1 day"})
