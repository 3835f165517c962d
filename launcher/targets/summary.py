"""A Markdown summary of a run report, for CI job pages ($GITHUB_STEP_SUMMARY): what ran, whether
the probe passed, what egress was blocked, and whose exit status the pipeline sees."""

from __future__ import annotations

import re

from launcher.values import visible

_MEANING = {
    "ok": "the agent ran and succeeded",
    "agent-failed": "the agent ran and failed (its own exit code)",
    "timeout": "the agent was stopped at its timeout",
    "policy-invalid": "refused before anything ran (policy or input)",
    "engine-error": "the sandbox could not be launched (Docker engine)",
    "probe-failed": "the sandbox did not take effect: the agent never started",
    "interrupted": "interrupted; the sandbox was removed",
    "surfaces-changed": "the agent left changes to files that host tools run or trust",
}


def _cell(text) -> str:
    """Text for a table cell: control characters made visible, then every character Markdown
    gives a meaning backslash-escaped (no link, image, HTML or code span of the agent's)."""
    return re.sub(r"([\\`*_{}\[\]()#+\-.!|<>~&])", r"\\\1", visible(str(text), keep_lines=False))


def markdown(report: dict) -> str:
    status, policy = report["status"], report.get("policy") or {}
    icon = "✅" if status == "ok" else "❌"
    lines = [f"### {icon} sandbox: {_MEANING.get(status, status)}", "",
             "| | |", "|---|---|",
             f"| exit status | `{report['exit_code']}` ({'the agent' if report['agent']['exit_code'] is not None else 'sandbox'}) |",
             f"| policy | {_cell(policy.get('name', '-'))} (sha256 `{policy.get('sha256', '-')[:12]}`) |"]
    probe = report.get("probe")
    if probe is None:
        lines.append("| probe | not run |")
    else:
        failed = [c for c in probe["checks"] if not c["ok"]]
        verdict = "passed" if probe["ok"] else f"**failed** ({len(failed)} check(s))" if failed else "**did not finish**"
        lines.append(f"| probe | {verdict}: {len(probe['checks'])} checks |")
    lines.append(f"| duration | {report['duration_seconds']:.1f} s |")
    if report.get("error"):
        lines.append(f"| error | {_cell(report['error'].splitlines()[0])} |")
    if probe and not probe["ok"]:
        lines += ["", "Failed probe checks:", ""]
        lines += [f"- `{c['id']}`: expected {_cell(c['expected'])}, observed {_cell(c['observed'])}"
                  for c in probe["checks"] if not c["ok"]]
    changes = report.get("workspace_changes") or []
    if changes:
        lines += ["", f"**Files host tools run or trust, changed by the agent ({len(changes)}):** review them "
                  "before running git or any tool in this workspace.", "",
                  "| change | path | why it matters |", "|---|---|---|"]
        lines += [f"| {c['change']} | {_cell(c['path'])} | {_cell(c['detail'])} |" for c in changes]
    egress = report.get("egress")
    if egress is not None:
        blocked = egress["blocked"]
        lines += ["", f"**Egress blocked:** {sum(b['count'] for b in blocked) if blocked else 'nothing'}"]
        if blocked:
            lines += ["", "| method | host | port | requests |", "|---|---|---|---|"]
            lines += [f"| {_cell(b['method'])} | {_cell(b['host'])} | {b['port']} | {b['count']} |" for b in blocked]
    return "\n".join(lines) + "\n\n"


def append(path: str, report: dict) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(markdown(report))
