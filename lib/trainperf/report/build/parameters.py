"""The parameters a report notebook declares (its first code cell tagged ``parameters``, as
:func:`papermill.inspect_notebook` reads them), and command-line values converted to the declared type, so
``-p title 1.10`` stays the string ``"1.10"``: the type of an annotation (``price: "Optional[float]" = None``, as the
report notebooks declare theirs, so ``papermill --help-notebook`` shows every type) or ``# type:`` comment, else the
default's, else (a ``None`` default) the type its help starts with (``# float: USD per hour``).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

PATH_PARAMETERS = ("data", "steps", "baseline_runs", "candidate_runs", "claims")
"""Parameters holding paths: relative ones on the command line are taken from the current folder (the notebooks
run in ``notebooks/``); ``trainperf report --data`` replaces each one ``-p`` does not give."""


class ParameterError(ValueError):
    """A report parameter that is unknown, or a value that does not fit its type."""


@dataclass(frozen=True)
class Declared:
    """One parameter of a notebook: name, default value, declared types."""

    name: str
    default: object
    types: tuple[str, ...]

    def convert(self, text: str) -> object:
        """The command-line value ``text`` as this parameter's type: ``None`` first (``none``, ``null`` or empty
        text), then the other type; a ``list`` takes a JSON/Python list or one bare item, as a one-item list."""
        problems = []
        for kind in self.types:
            try:
                return _CONVERTERS[kind](text)
            except (ValueError, SyntaxError, KeyError) as exc:
                problems.append(f"{kind}: {exc}")
        raise ParameterError(f"parameter {self.name!r} takes {' | '.join(self.types)}; "
                             f"cannot use {text!r} ({'; '.join(problems)})")


def declared_parameters(path: str | Path) -> dict[str, Declared]:
    """The parameters declared in the notebook at ``path``, in order, as papermill's inspection finds them;
    ``ParameterError`` when it finds none, or a default that is not a literal."""
    import papermill

    found = papermill.inspect_notebook(str(path))
    if not found:
        raise ParameterError(f"{path}: no parameters in a code cell tagged 'parameters'")
    out: dict[str, Declared] = {}
    for name, parameter in found.items():
        try:
            default = ast.literal_eval(parameter["default"])
        except (ValueError, SyntaxError) as exc:
            raise ParameterError(f"{path}: parameter {name} must be a literal, "
                                 f"not {parameter['default']!r}") from exc
        annotated = parameter["inferred_type_name"].strip().removeprefix("Optional[")  # "Optional[float]": float
        annotated = annotated.partition("[")[0].removesuffix("]").strip()
        kind = annotated if annotated in _CONVERTERS and annotated != "None" else None
        if default is None:  # `x = None  # float: ...`: None or the type the help names
            kind = kind or parameter["help"].partition(":")[0].strip()
            types = ("None", kind) if kind in _CONVERTERS and kind != "None" else ("None",)
        else:
            types = (kind or type(default).__name__,)
        out[name] = Declared(name, default, types)
    return out


def resolve_paths(name: str, value: object) -> object:
    """``value`` of parameter ``name`` with relative paths made absolute from the current folder when ``name`` is
    one of :data:`PATH_PARAMETERS`; ``ParameterError`` for a path that is not text."""
    if name not in PATH_PARAMETERS or value is None:
        return value
    paths = [value] if isinstance(value, str) else value
    if not all(isinstance(v, str) for v in paths):
        raise ParameterError(f"parameter {name!r} takes paths, not {value!r}")
    resolved = [str(Path(v).resolve()) for v in paths]
    return resolved[0] if isinstance(value, str) else resolved


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


def _literal(text: str, kind: type) -> object:
    """``text`` read as JSON, else as a Python literal; ``ValueError`` unless it is a ``kind``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            raise ValueError(f"not a {kind.__name__} literal") from None
    if not isinstance(value, kind):
        raise ValueError(f"not a {kind.__name__}")
    return value


def _to_list(text: str) -> list:
    """A JSON or Python list; ``[a, b]`` of bare words as ``["a", "b"]``; anything else as a one-item list."""
    inner = text.strip()
    if not inner.startswith("["):
        return [text]
    try:
        return _literal(inner, list)  # type: ignore[return-value]
    except ValueError:
        if not inner.endswith("]"):
            raise
        return [item.strip().strip("'\"") for item in inner[1:-1].split(",") if item.strip()]


_CONVERTERS = {
    "None": _to_none, "bool": _to_bool, "int": int, "float": float, "str": str, "list": _to_list,
    "dict": lambda text: _literal(text, dict),
}
