"""The price file: the packaged one cites its source and date, and a user's bad file is refused
in one line naming what is wrong."""

from __future__ import annotations

import json
import os

import pytest

from aoizora.compare.prices import default_prices, load_prices, parse_prices
from aoizora.errors import PriceFileError


def test_the_packaged_prices_are_dated_and_every_price_cites_a_source():
    table = default_prices()
    assert table.currency == "USD" and len(table.read) == 10
    assert table.prices, "the packaged file lists generations"
    for price in table.prices.values():
        if price.per_chip_hour is None:
            assert price.absent  # a missing price says why
        else:
            assert price.per_chip_hour > 0 and price.source.startswith("https://")


def test_a_generation_the_file_does_not_list_has_no_price_and_says_so():
    price = default_prices().price("v4")
    assert price.per_chip_hour is None and "not in aoizora's packaged prices" in price.absent


def _file(tmp_path, data) -> str:
    path = tmp_path / "prices.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


GOOD = {"currency": "EUR", "read": "2026-01-31",
        "generations": {"v5litepod": {"price_per_chip_hour": 1.5, "source": "contract 42", "region": "eu"},
                        "v6e": {"price_per_chip_hour": None, "absent": "not rented"}}}


def test_a_users_file_is_read_with_generation_aliases(tmp_path):
    table = load_prices(_file(tmp_path, GOOD))
    assert table.currency == "EUR" and table.read == "2026-01-31"
    assert table.price("v5e").per_chip_hour == 1.5 and table.price("v5e").source == "contract 42"
    assert table.price("v6e").per_chip_hour is None and table.price("v6e").absent == "not rented"
    assert table.origin.startswith("price file ")


def _with(**changes):
    data = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if key.startswith("v5e_"):
            data["generations"]["v5litepod"][key[4:]] = value
        else:
            data[key] = value
    return data


@pytest.mark.parametrize("data, fragment", [
    ("{", "is not JSON"),
    ("[1, 2]", "is not a JSON object"),
    (json.dumps(_with(currency="")), "'currency' must be a non-empty string"),
    (json.dumps(_with(read="yesterday")), "'read' is 'yesterday', not the date"),
    (json.dumps(_with(read="2026-13-01")), "not the date"),
    (json.dumps(_with(generations={})), "'generations' must be an object"),
    (json.dumps(_with(generations={"v9z": {"price_per_chip_hour": 1, "source": "x"}})), "unknown TPU generation"),
    (json.dumps(_with(v5e_price_per_chip_hour=-1)), "not a positive finite number"),
    (json.dumps(_with(v5e_price_per_chip_hour="1.2")), "not a positive finite number"),
    (json.dumps(_with(v5e_price_per_chip_hour=True)), "not a positive finite number"),
    ('{"currency": "USD", "read": "2026-01-31", "generations": {"v5e": {"price_per_chip_hour": NaN, '
     '"source": "x"}}}', "NaN is not a JSON number"),
    (json.dumps(_with(v5e_source=None)), "a price needs 'source'"),
    (json.dumps(_with(v5e_region=3)), "'region' is 3, not a string"),
    (json.dumps(_with(generations={"v6e": {"price_per_chip_hour": None}})), "needs 'absent'"),
    (json.dumps(_with(generations={"v6e": {"source": "x"}})), "has no 'price_per_chip_hour'"),
    (json.dumps(_with(generations={"v6e": 2.7})), "must be an object"),
    (json.dumps(_with(generations={"v5e": {"price_per_chip_hour": 1, "source": "x"},
                                   "v5litepod": {"price_per_chip_hour": 2, "source": "y"}})), "v5e twice"),
])
def test_a_bad_price_file_is_refused_in_one_line_naming_the_problem(tmp_path, data, fragment):
    with pytest.raises(PriceFileError) as info:
        load_prices(_file(tmp_path, data))
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_a_missing_file_or_a_folder_is_refused(tmp_path):
    with pytest.raises(PriceFileError, match="cannot read price file .*No such file"):
        load_prices(tmp_path / "none.json")
    with pytest.raises(PriceFileError, match="cannot read price file"):
        load_prices(tmp_path)


def test_a_huge_file_is_not_read_whole(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as fh:
        fh.truncate(2 * 2**20)
    with pytest.raises(PriceFileError, match="larger than 1 MiB"):
        load_prices(path)


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_a_device_is_not_read_whole():
    with pytest.raises(PriceFileError):
        load_prices("/dev/zero")


def test_parse_prices_names_its_source():
    with pytest.raises(PriceFileError, match="^my table: 'currency'"):
        parse_prices({"read": "2026-01-01", "generations": {}}, "my table")
