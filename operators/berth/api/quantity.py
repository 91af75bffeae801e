"""Kubernetes resource quantities (``500m``, ``2Gi``, ``1e3``): the one implementation Berth uses.

Quotas, reservations and the scheduler all compare quantities that users wrote in
different units (``2Gi`` against ``1500Mi``), so parsing must give exactly what the
Kubernetes API machinery gives: the same grammar, the same rounding (values are rounded
up to nano units, as ``resource.ParseQuantity`` does), the same canonical text.
Values are :class:`decimal.Decimal` so that nothing is lost to floating point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, ROUND_UP, Context, Decimal, localcontext
from enum import StrEnum
from functools import lru_cache
from typing import Annotated, Any, Final

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

__all__ = [
    "MAX_QUANTITY_LENGTH",
    "NON_NEGATIVE_QUANTITY_PATTERN",
    "QUANTITY_PATTERN",
    "Quantity",
    "QuantityError",
    "QuantityFormat",
    "QuantityStr",
    "ResourceList",
    "SignedQuantity",
    "canonical_quantity",
    "format_quantity",
    "milli_value",
    "parse_quantity",
    "parse_resource_list",
    "quantity_format",
    "value_ceil",
]

# The grammar of resource.ParseQuantity: an optional sign, a decimal number (``1``, ``1.``,
# ``.5``), then either a binary suffix, a decimal SI suffix or a base-10 exponent.
# Stricter than the pattern controller-gen emits, which also lets ``1e1.5`` through although
# the Go parser rejects it.
_NUMBER = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)"
_SUFFIX = r"([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)"
QUANTITY_PATTERN: Final = rf"^[+-]?{_NUMBER}{_SUFFIX}?$"
"""Any quantity the API machinery accepts, negative ones included."""
NON_NEGATIVE_QUANTITY_PATTERN: Final = rf"^\+?{_NUMBER}{_SUFFIX}?$"
"""Quantities without a minus sign: what every resource amount in these APIs must be."""
MAX_QUANTITY_LENGTH: Final = 64
"""Longest quantity text accepted in objects. Nobody writes more; the bound lets the API
server estimate the cost of CEL rules that parse quantities (unbounded strings fail it)."""

_PARSE_RE: Final = re.compile(
    r"(?P<sign>[+-])?(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)

_DECIMAL_SUFFIXES: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXPONENT: Final = {exponent: suffix for suffix, exponent in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER: Final = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]

_NANO: Final = Decimal("1e-9")
# resource.Quantity caps binary and exponent-form values at the int64 maximum.
_MAX_ALLOWED: Final = Decimal(2**63 - 1)
# Wide enough for any quantity a person writes; the default 28 digits would round big values.
_CONTEXT: Final = Context(prec=4096, Emax=10**9, Emin=-(10**9))


class QuantityError(ValueError):
    """A quantity that the Kubernetes API machinery would not accept."""


class QuantityFormat(StrEnum):
    """How a quantity is written; it decides its canonical text (Go's ``resource.Format``)."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[Decimal, QuantityFormat]:
    match = _PARSE_RE.fullmatch(text)
    if match is None:
        raise QuantityError(f"quantity {text!r} is malformed (examples: 500m, 1.5, 2Gi, 1e3)")
    suffix = match["suffix"] or ""
    with localcontext(_CONTEXT):
        number = Decimal(match["number"])
        if suffix in _BINARY_SUFFIXES:
            fmt = QuantityFormat.BINARY_SI
            value = number * (Decimal(2) ** _BINARY_SUFFIXES[suffix])
        elif suffix in _DECIMAL_SUFFIXES:
            fmt = QuantityFormat.DECIMAL_SI
            value = number.scaleb(_DECIMAL_SUFFIXES[suffix])
        else:
            fmt = QuantityFormat.DECIMAL_EXPONENT
            value = number.scaleb(int(suffix[1:]))
        if fmt is not QuantityFormat.DECIMAL_SI and value > _MAX_ALLOWED:
            value = _MAX_ALLOWED
        if value != 0:
            # Like ParseQuantity: anything non-zero below a nano unit rounds up, never to zero.
            value = value.quantize(_NANO, rounding=ROUND_UP)
        # Whole numbers as plain integers (100, not 1E+2), fractions without trailing zeros.
        value = value.quantize(1) if value == value.to_integral_value() else value.normalize()
        if match["sign"] == "-" and value != 0:
            value = -value
    return value, fmt


def _text(value: Any) -> str:
    """The text of a quantity as it appears in YAML or JSON: a string or a number."""
    if isinstance(value, QuantityStr | str):
        return str(value)
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a number or a string, not {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity {value!r} is not a finite number")
        if value.is_integer():
            return str(int(value))
        return format(Decimal(repr(value)), "f")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise QuantityError(f"quantity {value!r} is not a finite number")
        return format(value, "f")
    raise QuantityError(f"quantity must be a number or a string, not {type(value).__name__}")


def parse_quantity(value: str | int | float | Decimal, *, non_negative: bool = False) -> Decimal:
    """The exact value of a quantity (``"1500m"`` -> ``Decimal("1.5")``).

    Raises :class:`QuantityError` when Kubernetes would reject the text, or when
    ``non_negative`` is set and the value is below zero.
    """
    number, _ = _parse(_text(value))
    if non_negative and number < 0:
        raise QuantityError(f"quantity {value!r} must not be negative")
    return number


def quantity_format(value: str | int | float | Decimal) -> QuantityFormat:
    """The format a quantity is written in (``2Gi`` is BinarySI, ``1e3`` DecimalExponent)."""
    return _parse(_text(value))[1]


def format_quantity(value: Decimal | int, fmt: QuantityFormat = QuantityFormat.DECIMAL_SI) -> str:
    """Canonical text for a value, as ``resource.Quantity.String()`` writes it.

    The value is first rounded up to nano units. BinarySI falls back to DecimalSI for
    values below 1024 in magnitude or with a fractional part, like Go does.
    """
    with localcontext(_CONTEXT):
        number = Decimal(value)
        if not number.is_finite():
            raise QuantityError(f"cannot format {value!r} as a quantity")
        if number == 0:
            return "0"
        number = number.quantize(_NANO, rounding=ROUND_UP)
        if (
            fmt is QuantityFormat.BINARY_SI
            and abs(number) >= 1024
            and number == number.to_integral()
        ):
            return _format_binary(int(number))
        mantissa, exponent = _mantissa_exponent(number)
        if fmt is QuantityFormat.DECIMAL_EXPONENT:
            return f"{mantissa}e{exponent}" if exponent else str(mantissa)
        if exponent > 18:
            mantissa, exponent = mantissa * 10 ** (exponent - 18), 18
        return f"{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"


def _mantissa_exponent(number: Decimal) -> tuple[int, int]:
    """``number == mantissa * 10**exponent`` with the exponent a multiple of three."""
    sign, digits, exponent = number.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    return (-mantissa if sign else mantissa), exponent


def _format_binary(number: int) -> str:
    power = 0
    magnitude = abs(number)
    while magnitude >= 1024 and magnitude % 1024 == 0 and power < len(_BINARY_BY_POWER) - 1:
        magnitude //= 1024
        power += 1
    return f"{'-' if number < 0 else ''}{magnitude}{_BINARY_BY_POWER[power]}"


def canonical_quantity(value: str | int | float | Decimal) -> str:
    """The text Kubernetes shows for a quantity (``"1000m"`` is ``"1"``, ``"1.5Gi"`` ``"1536Mi"``).

    Equal values can print differently: the format the value was written in is kept.
    """
    number, fmt = _parse(_text(value))
    return format_quantity(number, fmt)


def milli_value(value: str | int | float | Decimal) -> int:
    """The value in thousandths, rounded up (``resource.Quantity.MilliValue``; CPU millicores)."""
    with localcontext(_CONTEXT):
        return int((parse_quantity(value) * 1000).to_integral_value(rounding=ROUND_CEILING))


def value_ceil(value: str | int | float | Decimal) -> int:
    """The value as a whole number, rounded up (``resource.Quantity.Value``; memory bytes)."""
    with localcontext(_CONTEXT):
        return int(parse_quantity(value).to_integral_value(rounding=ROUND_CEILING))


class QuantityStr(str):
    """A quantity exactly as written (so objects round-trip), which also knows its value."""

    __slots__ = ()

    @property
    def value(self) -> Decimal:
        """The exact value (``QuantityStr("2Gi").value == 2147483648``)."""
        return _parse(str(self))[0]

    @property
    def quantity_format(self) -> QuantityFormat:
        """How the quantity is written (BinarySI for ``2Gi``)."""
        return _parse(str(self))[1]

    def milli(self) -> int:
        """The value in thousandths, rounded up."""
        return milli_value(str(self))

    def canonical(self) -> str:
        """The text Kubernetes would show for this quantity."""
        return canonical_quantity(str(self))


def _validator(*, non_negative: bool) -> Any:
    def validate(value: Any) -> QuantityStr:
        text = _text(value)
        if len(text) > MAX_QUANTITY_LENGTH:
            raise QuantityError(f"quantity is longer than {MAX_QUANTITY_LENGTH} characters")
        parse_quantity(text, non_negative=non_negative)
        return QuantityStr(text)

    return validate


def _json_schema(pattern: str, *, non_negative: bool) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
        "pattern": pattern,
        "maxLength": MAX_QUANTITY_LENGTH,
    }
    if non_negative:
        # The pattern only applies to strings; this catches a bare negative integer.
        schema["minimum"] = 0
    return schema


Quantity = Annotated[
    QuantityStr,
    PlainValidator(_validator(non_negative=True)),
    PlainSerializer(str, return_type=str),
    WithJsonSchema(_json_schema(NON_NEGATIVE_QUANTITY_PATTERN, non_negative=True)),
]
"""A non-negative quantity: what a resource amount is. Accepts ``1.5``, ``2``, ``"1500m"``."""

SignedQuantity = Annotated[
    QuantityStr,
    PlainValidator(_validator(non_negative=False)),
    PlainSerializer(str, return_type=str),
    WithJsonSchema(_json_schema(QUANTITY_PATTERN, non_negative=False)),
]
"""A quantity that may be negative (a difference, never a resource amount)."""

ResourceList = dict[str, Quantity]
"""Resource name to amount (``{"cpu": "500m", "memory": "1Gi"}``), as ``corev1.ResourceList``."""


def parse_resource_list(
    resources: Mapping[str, str | int | float | Decimal] | None,
) -> dict[str, Decimal]:
    """Exact values of a resource list; ``None`` is the empty list."""
    return {name: parse_quantity(amount) for name, amount in (resources or {}).items()}
