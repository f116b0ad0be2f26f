"""Item contracts: what an item type promises of its fields, checked with JSON Schema (``jsonschema``).

An item type declares its contract with its fields (docs/quality.md):

* ``required`` (class variable): fields that must not be empty (``None``, ``""``, ``[]``, ``{}``);
* per field, in the dataclass field's ``metadata``:

  - ``"schema"``: a JSON Schema for the field's value (``{"type": "string", "pattern": "^[0-9]+$"}``,
    ``{"minimum": 0}``, ``{"enum": [...]}``, ``{"minLength": 3}``...);
  - ``"required": True``: the same as naming it in ``required``;
  - ``"coverage": 0.9``: the floor of the field's coverage (share of items with it non-empty) below which a
    cycle's figures open an event (crawlhub.extensions.quality);
  - ``"alert": {"drop": 0.3, "rise": 1.0}``: a stored value that falls (rises) by more than that share
    raises a change alert;

* ``schema`` (class variable): a whole JSON Schema (a dict, or the path of a ``.json`` file, relative to the
  module that defines the type), merged over what the fields declare.

Empty values are left out of the instance that is validated: a field's schema speaks of its value when
there is one; whether there must be one is ``required``'s business (reason ``missing <field>``).

Why ``jsonschema``: it is the reference implementation (Draft 2020-12, formats, ``$ref``), maintained, and it
reports *every* error with the path of the field it concerns (``iter_errors``), which is what a quarantine
record needs; faster compilers (fastjsonschema) stop at the first error and lose the field.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crawlhub.items import VOLATILE_FIELDS, is_empty


class ContractError(ValueError):
    """An item type's contract cannot be used (a bad schema, a file that cannot be read)."""


@dataclass(frozen=True)
class Contract:
    """What one item type promises (see the module's docstring)."""

    name: str
    schema: dict[str, Any]
    required: tuple[str, ...]
    fields: tuple[str, ...]  # the fields whose coverage is counted
    floors: dict[str, float] = field(default_factory=dict)
    alerts: dict[str, dict[str, float]] = field(default_factory=dict)
    validator: Any = None

    def check(self, values: dict[str, Any]) -> dict[str, list[str]]:
        """Field -> what is wrong with it (``""``: the item as a whole); empty when the item keeps the contract."""
        found: dict[str, list[str]] = {}
        for name in self.required:
            if is_empty(values.get(name)):
                found.setdefault(name, []).append(f"missing {name}")
        if self.validator is None:
            return found
        instance = {k: _jsonable(v) for k, v in values.items() if not is_empty(v)}
        for error in sorted(self.validator.iter_errors(instance), key=lambda e: list(e.absolute_path)):
            if error.validator == "required":  # said above, as "missing <field>"
                continue
            where = str(error.absolute_path[0]) if error.absolute_path else ""
            if where in found and found[where][0] == f"missing {where}":
                continue
            shown = ".".join(map(str, error.absolute_path))
            found.setdefault(where, []).append(f"{shown or 'item'}: {_short(error.message)}")
        return found


def _short(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def _jsonable(value: Any) -> Any:
    """A field's value as JSON Schema sees it (dates as ISO strings, decimals as numbers)."""
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _load_schema(cls: type, declared: Any) -> dict[str, Any]:
    if isinstance(declared, dict):
        return declared
    path = Path(declared)
    if not path.is_absolute():
        module = sys.modules.get(cls.__module__)
        base = Path(module.__file__).parent if module is not None and module.__file__ else Path.cwd()
        path = base / path
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ContractError(f"{cls.__name__}.schema: cannot read {path}: {exc}") from None
    if not isinstance(loaded, dict):
        raise ContractError(f"{cls.__name__}.schema: {path} is not a JSON object")
    return loaded


@functools.lru_cache(maxsize=256)
def contract_of(cls: type) -> Contract:
    """The contract of item type ``cls`` (a dataclass; a plain dict has ``dict_contract``)."""
    properties: dict[str, Any] = {}
    required = list(getattr(cls, "required", ()))
    floors: dict[str, float] = {}
    alerts: dict[str, dict[str, float]] = {}
    names: list[str] = []
    for f in dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ():
        names.append(f.name)
        declared = f.metadata
        if "schema" in declared:
            properties[f.name] = dict(declared["schema"])
        if declared.get("required") and f.name not in required:
            required.append(f.name)
        if "coverage" in declared:
            floor = float(declared["coverage"])
            if not 0 <= floor <= 1:
                raise ContractError(f"{cls.__name__}.{f.name}: coverage {floor} is not a share between 0 and 1")
            floors[f.name] = floor
        if "alert" in declared:
            rule = {k: float(v) for k, v in dict(declared["alert"]).items()}
            if not set(rule) <= {"drop", "rise"} or any(v <= 0 for v in rule.values()):
                raise ContractError(f"{cls.__name__}.{f.name}: alert takes 'drop' and 'rise', shares over 0: {rule}")
            alerts[f.name] = rule
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    whole = getattr(cls, "schema", None)
    if whole:
        extra = _load_schema(cls, whole)
        schema = {**schema, **extra, "properties": {**properties, **extra.get("properties", {})}}
        required += [n for n in extra.get("required", ()) if n not in required]
        schema.pop("required", None)  # said as "missing <field>", empty values included
    validator = None
    if schema["properties"] or set(schema) - {"type", "properties"}:
        import jsonschema  # here, not at import: a worker whose items declare no schema never loads it

        validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        try:
            validator_cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ContractError(f"{cls.__name__}: bad JSON Schema: {exc.message}") from None
        validator = validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)
    counted = tuple(n for n in names if n not in VOLATILE_FIELDS and not n.startswith("_"))
    return Contract(cls.__name__, schema, tuple(required), counted, floors, alerts, validator)


def dict_contract(required: tuple[str, ...]) -> Contract:
    return Contract("dict", {}, required, ())
