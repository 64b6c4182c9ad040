"""The parameters a report notebook declares, and command-line values for them.

A report notebook's first code cell is tagged ``parameters`` and holds only
assignments of literals, optionally annotated::

    data = ["../data/reference/seed_000_throughput.csv"]   # runs tables, folders, logs
    baseline = None                                          # str: run_id to scale against

papermill injects new values after that cell. Values given on the command
line as text (``-p NAME VALUE``) are converted to the parameter's declared
type, so a string stays a string (``-p title 1.10`` gives ``"1.10"``, not
``1.1``): the type is the annotation's when there is one, else the default's;
a ``None`` default whose help starts with a type name and a colon
(``# float: USD per hour``) takes ``None`` or that type.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

PARAMETERS_TAG = "parameters"
PATH_PARAMETERS = ("data", "steps", "baseline_runs", "candidate_runs")
"""Parameters whose values are paths: relative ones given on the command line
are taken from the current folder (the notebooks run in ``notebooks/``), and
``trainperf report --data`` replaces every one that ``-p`` does not give."""


class ParameterError(ValueError):
    """A report parameter that is unknown, or a value that does not fit its type."""


@dataclass(frozen=True)
class Declared:
    """One parameter of a notebook: name, default value, declared type, help comment."""

    name: str
    default: object
    types: tuple[str, ...]
    help: str

    def convert(self, text: str) -> object:
        """The command-line value ``text`` as this parameter's type.

        ``None`` is tried first (``none``, ``null`` or empty text), then the
        other types in declaration order; ``list[str]`` takes a JSON/Python
        list or one bare item, which becomes a one-element list.
        """
        problems = []
        for kind in sorted(self.types, key=lambda k: k != "None"):
            try:
                return _CONVERTERS[kind](text)
            except (ValueError, SyntaxError, KeyError) as exc:
                problems.append(f"{kind}: {exc}")
        raise ParameterError(f"parameter {self.name!r} takes {' | '.join(self.types)}; "
                             f"cannot use {text!r} ({'; '.join(problems)})")


def parameters_source(path: str | Path) -> str:
    """The source of the notebook's code cell tagged ``parameters`` (the
    notebook is read as plain JSON, nbformat 4)."""
    notebook = json.loads(Path(path).read_text())
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "code" and PARAMETERS_TAG in cell.get("metadata", {}).get("tags", []):
            source = cell.get("source", "")
            return "".join(source) if isinstance(source, list) else source
    raise ParameterError(f"{path}: no code cell tagged 'parameters'")


def declared_parameters(path: str | Path) -> dict[str, Declared]:
    """The parameters declared in the notebook at ``path``, in order.

    Raises ``ParameterError`` when the parameters cell holds anything other
    than assignments of literals to names.
    """
    source = parameters_source(path)
    lines = source.splitlines()
    out: dict[str, Declared] = {}
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            name, value, types = stmt.target.id, stmt.value, _annotation_types(stmt.annotation)
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name, value, types = stmt.targets[0].id, stmt.value, ()
        else:
            raise ParameterError(f"{path}: parameters cell line {stmt.lineno}: only `name = literal` is allowed")
        try:
            default = ast.literal_eval(value)
        except ValueError as exc:
            raise ParameterError(f"{path}: parameters cell line {stmt.lineno}: "
                                 f"{name} must be a literal") from exc
        comment = lines[stmt.end_lineno - 1][stmt.end_col_offset:].partition("#")[2].strip()
        hinted = comment.partition(":")[0].strip() if default is None else ""
        if not types and hinted in _CONVERTERS:  # `x = None  # float: ...`: None or the type the help names
            types = ("None", hinted)
        out[name] = Declared(name, default, types or (_type_of(default),), comment)
    return out


def convert_cli_parameters(path: str | Path, pairs: list[tuple[str, str]]) -> dict[str, object]:
    """``-p NAME VALUE`` pairs as typed values for the notebook at ``path``.

    Raises ``ParameterError`` for a name the notebook does not declare.
    """
    declared = declared_parameters(path)
    values: dict[str, object] = {}
    for name, text in pairs:
        if name not in declared:
            raise ParameterError(f"{Path(path).name} has no parameter {name!r}; "
                                 f"its parameters: {', '.join(declared)}")
        values[name] = resolve_paths(name, declared[name].convert(text))
    return values


def resolve_paths(name: str, value: object) -> object:
    """``value`` of parameter ``name`` with relative paths made absolute from
    the current folder when ``name`` is one of :data:`PATH_PARAMETERS`."""
    if name not in PATH_PARAMETERS or value is None:
        return value
    if isinstance(value, str):
        return str(Path(value).resolve())
    return [str(Path(v).resolve()) for v in value]


def _annotation_types(node: ast.expr) -> tuple[str, ...]:
    """``str | None`` → ``("str", "None")``; ``list[str]`` → ``("list",)``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _annotation_types(node.left) + _annotation_types(node.right)
    if isinstance(node, ast.Constant) and node.value is None:
        return ("None",)
    if isinstance(node, ast.Subscript):
        return _annotation_types(node.value)
    if isinstance(node, ast.Name) and node.id in _CONVERTERS:
        return (node.id,)
    raise ParameterError(f"unsupported parameter annotation {ast.unparse(node)!r}; "
                         f"use {', '.join(_CONVERTERS)} joined with |")


def _type_of(default: object) -> str:
    return "None" if default is None else type(default).__name__


def _to_bool(text: str) -> bool:
    word = text.strip().lower()
    if word in {"true", "1", "yes", "on"}:
        return True
    if word in {"false", "0", "no", "off"}:
        return False
    raise ValueError("not true or false")


def _to_none(text: str) -> None:
    if text.strip().lower() in {"none", "null", ""}:
        return None
    raise ValueError("not none")


def _to_list(text: str) -> list:
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            value = ast.literal_eval(stripped)
        if not isinstance(value, list):
            raise ValueError("not a list")
        return value
    return [text]


def _to_dict(text: str) -> dict:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


_CONVERTERS = {
    "None": _to_none, "bool": _to_bool, "int": int, "float": float, "str": str,
    "list": _to_list, "dict": _to_dict,
}
