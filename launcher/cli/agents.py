"""`sandbox agents`: the agent profiles, what each sets, and what was verified."""

from __future__ import annotations

import json

import click


@click.command(short_help="List the agent profiles that --agent selects.")
@click.option("--json", "as_json", is_flag=True, help="Every profile as JSON.")
def agents(as_json: bool) -> None:
    """List the agent profiles `--agent NAME` selects: the CLI and its pinned version, its image,
    the home paths it writes, the variables it gets, the model API its key is injected for, the
    hosts it needs in proxy mode, how it continues its last session, and what was run for real.

    \b
    Example:
      sandbox agents --json
    """
    from dataclasses import asdict

    from launcher import agents as profiles
    from launcher.agents import logins
    from launcher.engine import images

    rows = []
    for p in profiles.PROFILES.values():
        signins = [{"kind": logins.API_KEY, "brokered": True, "summary": "an API key (--model-key-env)"}] if p.model else []
        signins += [{"kind": s.kind, "brokered": isinstance(s, logins.Login), "summary": s.summary,
                     **({"why": s.why} if isinstance(s, logins.Unbrokered) else {"header": s.header.split(":")[0]})}
                    for s in logins.kinds(p)]
        rows.append({"name": p.name, "summary": p.summary,
                     "package": f"{p.package.registry}:{p.package.name}@{p.package.version}" if p.package else "",
                     "image": images.agent_profile_image(p.image).tag if p.image else images.AGENT_IMAGE,
                     "home": list(p.home_paths), "env": sorted(p.environment("$ENDPOINT", key_in_file=True)),
                     "model": asdict(p.model) if p.model else None, "hosts": list(p.hosts),
                     "headless": " ".join(p.headless), "interactive": " ".join(p.interactive),
                     "resume": " ".join(p.resume), "verified": p.verified,
                     "logins": signins})
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    for r in rows:
        model = r["model"]
        click.echo(f"{r['name']}: {r['summary']}")
        click.echo(f"  package {r['package'] or '-'}   image {r['image']}")
        click.echo(f"  home    {', '.join(r['home']) or '-'}")
        click.echo(f"  env     {', '.join(r['env']) or '-'}")
        injected = f"{model['upstream']} ({model['header'].split(':')[0]} injected by the proxy)" if model else "-"
        click.echo(f"  model   {injected}")
        for s in r["logins"][1:]:   # the API key is the model line above
            click.echo(f"  login   {s['kind']}: {s['summary']}" if s["brokered"] else
                       f"  login   {s['kind']}: not brokered: {s['summary']}: {s['why']}")
        click.echo(f"  hosts   {', '.join(r['hosts']) or '-'}   run: {r['headless']}")
        click.echo(f"  up      {r['interactive'] + ' (sandbox up --agent ' + r['name'] + ')' if r['interactive'] else '- (sandbox up --agent ' + r['name'] + ' opens a shell)'}")
        if r["resume"]:
            click.echo(f"  resume  {r['resume']} (home: {{mode: volume}} keeps the session)")
        click.echo(f"  checked {r['verified'] or '-'}")


COMMANDS = (agents,)
