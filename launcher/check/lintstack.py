"""`sandbox check`: read the stack `sandbox run` would apply (the files named, then the org, user and
repository layers of the pipeline's own list), gather the host facts, lint it (launcher/check/lint.py)
and compile it through the pipeline, so that check and compile never disagree."""

from __future__ import annotations

from launcher.check.lint import Doc, Finding, Severity, in_order, lint, Report
from launcher.errors import PolicyError
from launcher.host.gitgraph import GitPath
from launcher.policy.layers import Effective, Layer, LayerKind, combine

def check(refs: tuple[str, ...], workspace: str, target: str = "run",
          strict: bool = False) -> tuple[list[Finding], list[Doc]]:
    """Read the stack `sandbox run` would apply (plus the files named after the base) and lint it."""
    from launcher.host import host, hostfiles, hostpaths
    from launcher.pipeline import pipeline, stack
    from launcher.policy import trust
    from launcher.policy.policy import read_policy

    ws = hostpaths.existing_workspace(workspace)
    docs, layers, layer_problems, base, base_problem = [], [], [], None, None
    try:
        file, data = read_policy(refs[0])
        docs.append(Doc(kind=LayerKind.BASE, file=file, data=data))
        base = stack.load_base(refs[0])
    except PolicyError as exc:
        base_problem = exc
    # Files named after the base, then what `sandbox run` would add (the pipeline's own list): org,
    # user, the workspace's.
    pending: list[tuple[LayerKind, object]] = [
        (LayerKind.REPO if ref.rstrip("/").endswith(".sandbox.yaml") else LayerKind.EXTRA, ref) for ref in refs[1:]]
    pending += stack.layer_files(ws)
    seen = {hostpaths.workspace_real(d.file) for d in docs}
    for kind, source in pending:
        try:
            if isinstance(source, str):
                file, data = read_policy(source)
            else:
                found = source()
                if found is None:
                    continue
                file, data = found.path, found.data
        except PolicyError as exc:
            layer_problems.append((None, exc))
            continue
        if hostpaths.workspace_real(file) in seen:
            continue
        seen.add(hostpaths.workspace_real(file))
        doc = Doc(kind=kind, file=file, data=data)
        docs.append(doc)
        try:
            layers.append(stack.parse_layer(doc.data, doc.file, kind))
        except PolicyError as exc:
            layer_problems.append((doc, exc))
    repo = next((d for d in docs if d.kind is LayerKind.REPO and d.file == f"{ws}/.sandbox.yaml"), None)
    state = ""
    if repo:
        read = hostfiles.repo_policy_file(ws)   # what an approval is of: the file and what its build: reads
        approval = read.approval if read else repo.data
        digest = trust.sha256(approval)
        store_path, text = host.read_trust_store()
        if trust.status(trust.parse_store(text, store_path), ws, approval, None) is trust.Status.APPROVED:
            state = f"approved on this machine (sha256 {digest})"
        else:
            state = (f"not approved on this machine (sha256 {digest}); after review, approve it "
                     f"(`{trust.approve_command(repo.file)}`) or pass --trust-repo-policy {digest}")
    facts = pipeline.facts_for(base.policy, ws) if base else None
    findings = lint(docs, base=base, base_problem=base_problem, layers=layers, layer_problems=layer_problems,
                    facts=facts, workspace=ws, git_paths=_git_paths(ws), repo_state=state,
                    target=target, strict=strict)
    if base is not None and not any(f.severity is Severity.ERROR for f in findings):
        findings = _compiled(findings, docs, base, layers, ws, target)
    return findings, docs


def _compiled(findings: list[Finding], docs: list[Doc], base: Effective, layers: list[Layer], workspace: str,
              target: str) -> list[Finding]:
    """What the compiler refuses for this stack on this host is an error here too, so `check` and
    `compile` (and run, up, explain) never disagree: it is compiled by the pipeline's own step. A
    warning at the same place gives way to it."""
    from launcher.pipeline import pipeline, stack
    from launcher.targets import TARGETS

    eff, _ = combine(base.policy, layers, prior=base)
    try:
        pipeline.compiled(stack.Stack(effective=eff, notes=()), workspace, kind=TARGETS[target].kind)
    except PolicyError as exc:
        report = Report()
        report.problems(Severity.ERROR, "refused", exc.problems, {d.file: d for d in docs})
        refused = {(f.file, f.path) for f in report.findings}
        findings = [f for f in findings if (f.file, f.path) not in refused] + report.findings
    return in_order(findings)


def _git_paths(workspace: str) -> tuple[GitPath, ...]:
    from launcher.host import gitgraph, hostpaths

    try:
        return gitgraph.paths(workspace, hostpaths.path_fact(workspace).owner)
    except PolicyError:
        return ()

