"""Load an instance catalog: a JSON file on disk, or the built-in KWOK catalog.

Only the reading happens here; the parsing is the pure ``controller.scheduling.parse_catalog``.
The format is documented in ``docs/catalog.md``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Final

from controller.scheduling.instancetypes import CatalogError, InstanceType, parse_catalog
from controller.serialization import DuplicateKeyError, key_line, loads_json_strict

BUILTIN_PACKAGE: Final = "controller.cloudprovider.kwok"
BUILTIN_RESOURCE: Final = "catalog.json"


def builtin_catalog_text() -> str:
    """The JSON text of the catalog shipped with joiner (package data)."""
    return resources.files(BUILTIN_PACKAGE).joinpath(BUILTIN_RESOURCE).read_text(encoding="utf-8")


def parse_catalog_text(text: str, *, source: str) -> tuple[InstanceType, ...]:
    """Parse catalog JSON text; errors name ``source`` (a path, a ConfigMap) and the field."""
    try:
        data = loads_json_strict(text, parse_constant=_no_constant)
    except DuplicateKeyError as err:
        raise CatalogError(f"{source}: {err}") from err
    except json.JSONDecodeError as err:
        raise CatalogError(f"{source}: not valid JSON: {err}") from err
    except ValueError as err:  # NaN, Infinity: not JSON, and no price
        raise CatalogError(f"{source}: not valid JSON: {err}") from err
    except RecursionError as err:
        raise CatalogError(f"{source}: not readable: nested too deep") from err
    try:
        return parse_catalog(data)
    except CatalogError as err:
        line = key_line(text, 1, list(err.path)) if err.path else 0
        raise CatalogError(f"{source}: {f'line {line}: ' if line else ''}{err}") from err


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows (prices must be finite)")


def load_catalog(path: str | Path | None = None) -> tuple[InstanceType, ...]:
    """The catalog at ``path``, or the built-in one when ``path`` is None or empty.

    Raises :class:`CatalogError` (a ``ValueError``) naming the file and the bad field, and
    ``OSError`` when the file cannot be read.
    """
    if not path:
        return parse_catalog_text(builtin_catalog_text(), source="built-in catalog")
    file = Path(path)
    data = file.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CatalogError(f"{file}: not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start})") from err
    return parse_catalog_text(text, source=str(file))
