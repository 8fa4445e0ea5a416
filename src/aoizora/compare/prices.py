"""Chip prices: a dated file of per-chip-hour prices per TPU generation, each citing its source.

The packaged file (`aoizora/data/tpu_prices.json`) holds public on-demand list prices as read on its
date; a generation with no published figure found has a null price and the reason, so a slice of
that generation gets no cost rather than a guessed one. `aoizora compare --prices FILE` reads a
user's file of the same format (their region, discounts, commitments); every defect in it is
refused in one line naming where it is.
"""

from __future__ import annotations

import datetime
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from aoizora.errors import PriceFileError, TopologyError, clipped
from aoizora.topology import canonical_generation

#: Largest price file read: a table of a few generations is a few KiB; the cap keeps a wrong path
#: (a device, a checkpoint) from being read whole into memory.
MAX_PRICE_FILE_BYTES = 1 * 2**20


@dataclass(frozen=True)
class ChipPrice:
    """One generation's price per chip-hour (None: not published or not known) and where it is from."""

    generation: str
    per_chip_hour: float | None
    source: str | None = None
    region: str | None = None
    absent: str | None = None  # why there is no price

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"generation": self.generation, "price_per_chip_hour": self.per_chip_hour}
        out.update({k: v for k, v in (("source", self.source), ("region", self.region), ("absent", self.absent))
                    if v is not None})
        return out


@dataclass(frozen=True)
class PriceTable:
    """The prices of a price file: per canonical generation, with the file's currency and date."""

    currency: str
    read: str  # the date the prices were read, YYYY-MM-DD
    prices: dict[str, ChipPrice]
    origin: str  # "aoizora's packaged prices" or the file given

    def price(self, generation: str) -> ChipPrice:
        """The generation's price; a generation the file does not list has none (and says so)."""
        return self.prices.get(generation) or ChipPrice(generation, None,
                                                        absent=f"{generation} is not in {self.origin}")

    def to_json(self) -> dict[str, Any]:
        return {"currency": self.currency, "read": self.read, "origin": self.origin,
                "generations": {g: p.to_json() for g, p in sorted(self.prices.items())}}


def default_prices() -> PriceTable:
    """aoizora's packaged price file."""
    text = resources.files("aoizora").joinpath("data/tpu_prices.json").read_text(encoding="utf-8")
    return parse_prices(json.loads(text), "aoizora's packaged prices")


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The price file at `path` (None: the packaged one); PriceFileError (one line) if it cannot be
    read or is not of the format."""
    if path is None:
        return default_prices()
    where = f"price file {path}"
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_PRICE_FILE_BYTES + 1)
    except OSError as exc:
        raise PriceFileError(f"cannot read {where}: {exc.strerror}; pass an existing JSON price file") from None
    if len(raw) > MAX_PRICE_FILE_BYTES:
        raise PriceFileError(f"{where} is larger than {MAX_PRICE_FILE_BYTES // 2**20} MiB, far more than a price "
                             "table; pass a JSON price file")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        reason = "not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else f"not JSON ({exc})"
        raise PriceFileError(f"{where} is {reason}; see aoizora/data/tpu_prices.json for the format") from None
    return parse_prices(data, where)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_prices(data: Any, where: str) -> PriceTable:
    """A PriceTable from a price file's JSON (`where` names the file in messages and as the table's
    origin); PriceFileError names the first field that is wrong."""
    fix = "see aoizora/data/tpu_prices.json for the format"
    if not isinstance(data, dict):
        raise PriceFileError(f"{where} is not a JSON object; {fix}")
    currency = data.get("currency")
    if not isinstance(currency, str) or not currency.strip():
        raise PriceFileError(f"{where}: 'currency' must be a non-empty string (e.g. \"USD\"); {fix}")
    read = _date(data.get("read"), f"{where}: 'read'")
    generations = data.get("generations")
    if not isinstance(generations, dict) or not generations:
        raise PriceFileError(f"{where}: 'generations' must be an object of generation: price entries; {fix}")
    prices: dict[str, ChipPrice] = {}
    for name, entry in generations.items():
        price = _entry(name, entry, f"{where}: generations.{name}")
        if price.generation in prices:
            raise PriceFileError(f"{where}: generations list {price.generation} twice (as {name!r} too); keep one")
        prices[price.generation] = price
    return PriceTable(currency.strip(), read, prices, where)


def _entry(name: str, entry: Any, where: str) -> ChipPrice:
    try:
        generation = canonical_generation(name)
    except TopologyError as exc:
        raise PriceFileError(f"{where}: {exc}") from None
    if not isinstance(entry, dict):
        raise PriceFileError(f"{where} must be an object with 'price_per_chip_hour'")
    if "price_per_chip_hour" not in entry:
        raise PriceFileError(f"{where} has no 'price_per_chip_hour' (a positive number, or null with 'absent')")
    value = entry["price_per_chip_hour"]
    if value is None:
        absent = entry.get("absent")
        if not isinstance(absent, str) or not absent.strip():
            raise PriceFileError(f"{where}: a null 'price_per_chip_hour' needs 'absent', a sentence saying why")
        return ChipPrice(generation, None, absent=absent)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise PriceFileError(f"{where}: 'price_per_chip_hour' is {clipped(value)}, not a positive finite number")
    source = entry.get("source")
    if not isinstance(source, str) or not source.strip():
        raise PriceFileError(f"{where}: a price needs 'source', where it was published (a URL or a contract)")
    region = entry.get("region")
    if region is not None and not isinstance(region, str):
        raise PriceFileError(f"{where}: 'region' is {clipped(region)}, not a string")
    return ChipPrice(generation, float(value), source=source, region=region)


def _date(value: Any, where: str) -> str:
    try:
        return datetime.date.fromisoformat(value).isoformat() if isinstance(value, str) and len(value) == 10 \
            else _bad_date(value, where)
    except ValueError:
        return _bad_date(value, where)


def _bad_date(value: Any, where: str) -> str:
    raise PriceFileError(f"{where} is {clipped(value)}, not the date the prices were read as YYYY-MM-DD")
