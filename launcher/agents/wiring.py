"""`--agent NAME`: a profile applied to the base policy (before the layers, which still narrow it)
and to the agent's command. It sets the image, adds environment and, given a key by reference,
the model API's proxy secret; the home files are written by a small wrapper when the sandbox starts."""

from __future__ import annotations

import shlex
from dataclasses import replace

from launcher.agents.profile import AgentProfile
from launcher.errors import PolicyError, Problem
from launcher.plan.plan import PROBE_BUSYBOX
from launcher.policy.model import NetworkMode, NetworkPolicy, Policy, SecretPolicy


def _endpoint(profile: AgentProfile) -> str | None:
    return "$" + profile.endpoint_var() if profile.model else None


def _quoted(text: str, endpoint: str | None) -> str:
    """A shell word for text, with the endpoint variable left to expand at run time."""
    word = shlex.quote(text)
    return word.replace(endpoint, "'\"" + endpoint + "\"'") if endpoint else word


def wrapped(profile: AgentProfile, argv: tuple[str, ...], keyed: bool, shells: bool = False
            ) -> tuple[dict[str, str], tuple[str, ...]]:
    """(variables known before start, the command): the rest of the profile's variables and its
    home files are made by busybox sh from $SANDBOX_ENDPOINT_<secret>, then the CLI runs as given.
    `keyed`: a model key is injected, so the model wiring applies (the key goes into a home file
    where the profile has one: no secret-shaped variable enters the sandbox). `shells`: the
    variables go into ~/.bashrc as well, for the shells `sandbox up` opens."""
    endpoint = _endpoint(profile) if keyed else None
    env = profile.environment(endpoint, key_in_file=True)
    static = {k: v for k, v in env.items() if not endpoint or endpoint not in v}
    exports = "".join(f"export {k}={_quoted(v, endpoint)}; " for k, v in env.items() if k not in static)
    # Once: a kept home (home.mode volume) would gain the same line at every `sandbox up`.
    script = exports + (f"line={shlex.quote(exports)}; {PROBE_BUSYBOX} grep -qxF \"$line\" \"$HOME\"/.bashrc 2>/dev/null "
                        f"|| echo \"$line\" >> \"$HOME\"/.bashrc; " if shells and exports else "")
    wiring = set(profile.model.home_files) | set(profile.model.key_files) if profile.model and keyed else set()
    seeds = set(profile.seed_files) - wiring        # written only where missing (a kept home keeps its own)
    for path, text in profile.home_files(endpoint, key_in_file=True).items():
        target, parent = f'"$HOME"/{shlex.quote(path)}', path.rpartition("/")[0]
        write = (f'{PROBE_BUSYBOX} mkdir -p "$HOME"/{shlex.quote(parent)} && ' if parent else "") + \
            f"printf %s {_quoted(text, endpoint)} > {target}"
        script += (f"[ -e {target} ] || {{ {write}; }}; " if path in seeds else f"{write}; ")
    if not script:
        return static, argv
    return static, (PROBE_BUSYBOX, "sh", "-c", script + 'exec "$@"', profile.name, *argv)


def with_agent(policy: Policy, profile: AgentProfile, image: str, *, key_env: str = "", key_file: str = "",
               upstream: str = "") -> Policy:
    """The base policy with the profile's image and variables and, when a key is given, the model
    API's secret entry: the proxy reaches that one endpoint and adds the key. A policy without a
    network gets proxy mode for it alone (no allow entry), unless it says network.model: false."""
    keyed = bool(key_env or key_file)
    secrets, network = policy.secrets, policy.network
    if keyed:
        if profile.model is None:
            raise _problem("--agent", "an agent with a model API", f"{profile.name} has none", "")
        if not network.model:
            raise _problem("--model-key-env", "a policy that lets the agent reach its model API",
                           f"{policy.name} sets network.model: false", "run without a key, or with a policy "
                           "that leaves network.model on")
        if network.mode is NetworkMode.NONE:   # the model endpoint alone: nothing else is allowed
            network = NetworkPolicy(mode=NetworkMode.PROXY, allow=(), allow_ip_literals=False)
        secrets += (SecretPolicy(name=profile.model.secret, env=key_env, file=key_file, model=True,
                                 upstream=(upstream or profile.model.upstream).rstrip("/"), header=profile.model.header,
                                 login=profile.model.login, path=profile.model.path),)
    static, _ = wrapped(profile, (), keyed)
    env = replace(policy.env, set_values=tuple({**dict(policy.env.set_values), **static}.items()))
    return replace(policy, image=image, env=env, secrets=secrets, network=network)


def model_key_kept(policy: Policy, keyed: bool, decided_by: dict[str, str]) -> None:
    """After the layers: a model key the command line gave must still have its way out; a ceiling
    that took it (network.mode none, network.model false) is an error, not a silent "Not logged in"."""
    if keyed and not any(s.model for s in policy.secrets):
        field, value = (("network.model", "false") if not policy.network.model else
                        ("network.mode", "none") if policy.network.mode is NetworkMode.NONE else ("secrets", "a list without it"))
        raise _problem("--model-key-env", "a policy that lets the agent reach its model API",
                       f"{decided_by.get(field, 'a layer')} sets {field}: {value}",
                       "that layer is a ceiling: run without a key, or have it allow the model API")


def _problem(path: str, expected: str, found: str, hint: str) -> PolicyError:
    return PolicyError([Problem(file="command line", path=path, expected=expected, found=found, hint=hint)])
