"""The result of building one report."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReportResult:
    """What building one report gave (``trainperf.report.build.pipeline`` builds it; the index and the command
    line show it)."""

    name: str
    source: str
    executed: str | None
    html: str | None
    seconds: float
    error: str | None = None
    facts: dict[str, object] = field(default_factory=dict)
    not_applicable: str | None = None
    """What the data lacks, when the report raised ``NotApplicable`` (not a failure)."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def title(self) -> str:
        return str(self.facts.get("title") or self.name.replace("_", " ").capitalize())
