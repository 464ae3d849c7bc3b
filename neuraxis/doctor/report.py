"""doctor's output: one line a finding with its advice under it, or JSON
for tools; and the exit status (0 only when nothing failed)."""

from __future__ import annotations

import json
from collections import Counter

from neuraxis.doctor.finding import Finding, Status

MARKS = {Status.OK: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL", Status.SKIP: "skip"}


def passed(findings: list[Finding]) -> bool:
    return not any(f.status is Status.FAIL for f in findings)


def render_text(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        lines.append(f"{MARKS[f.status]:<5} {f.area}/{f.check}: {f.found}")
        if f.advice and f.status is not Status.OK:
            lines.append(f"      -> {f.advice}")
    counts = Counter(f.status for f in findings)
    lines.append(
        f"doctor: {counts[Status.FAIL]} failed, {counts[Status.WARN]} warnings, "
        f"{counts[Status.OK]} passed, {counts[Status.SKIP]} not applicable"
    )
    return "\n".join(lines) + "\n"


def render_json(findings: list[Finding]) -> str:
    return (
        json.dumps(
            {"passed": passed(findings), "findings": [f.to_dict() for f in findings]}, indent=2
        )
        + "\n"
    )
