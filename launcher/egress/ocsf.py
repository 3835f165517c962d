"""The proxy's requests as OCSF HTTP Activity events (class 4002 in the Network Activity category), and
the rule changes of a running sandbox (`sandbox egress`) as Entity Management events (class 3004),
one JSON object per line: what security teams' pipelines ingest. Field names and enums are OCSF
1.6.0's (the mapping, and why each value, is in docs/egress.md "OCSF events")."""

from __future__ import annotations

import json

from launcher.__version__ import __version__
from launcher.egress.audit import EgressEvent, RuleChange

SCHEMA_VERSION = "1.6.0"
CATEGORY_UID, CATEGORY_NAME = 4, "Network Activity"
CLASS_UID, CLASS_NAME = 4002, "HTTP Activity"
# HTTP Activity's activity_id per method (0 Unknown, 99 Other: the method in activity_name).
ACTIVITIES = {"CONNECT": 1, "DELETE": 2, "GET": 3, "HEAD": 4, "OPTIONS": 5, "POST": 6, "PUT": 7, "TRACE": 8,
              "PATCH": 9}
OTHER = 99
# decision -> (action_id, action, disposition_id, disposition, status_id, status, severity_id, severity)
OUTCOMES = {
    "allowed": (1, "Allowed", 1, "Allowed", 1, "Success", 1, "Informational"),
    # audit mode: let through, and the policy violation recorded ("Detected": without further action)
    "would-refuse": (1, "Allowed", 15, "Detected", 1, "Success", 2, "Low"),
    "refused": (2, "Denied", 2, "Blocked", 2, "Failure", 2, "Low"),
}
PRODUCT = {"name": "sandbox", "vendor_name": "sandbox", "version": __version__}
# A rule added or removed: OCSF's class for a create/update/delete of a managed entity by a
# management action (here `sandbox egress`, with the person's reason as its comment).
CHANGE_CATEGORY_UID, CHANGE_CATEGORY_NAME = 3, "Identity & Access Management"
CHANGE_CLASS_UID, CHANGE_CLASS_NAME = 3004, "Entity Management"
CHANGE_ACTIVITIES = {"allow": (1, "Create"), "deny": (4, "Delete")}
ENTITY_OTHER = 99   # managed_entity.type_id: an egress allow rule is none of OCSF's listed kinds


def event(e: EgressEvent, sandbox: str = "") -> dict | None:
    """One request as an HTTP Activity event; None for a connection on which no request was read
    (no method: nothing an HTTP Activity could say)."""
    if e.kind == "-":
        return None
    method = e.method.upper()
    activity = ACTIVITIES.get(method, OTHER)
    action_id, action, disposition_id, disposition, status_id, status, severity_id, severity = OUTCOMES[e.decision]
    port = int(e.port) if e.port.isdigit() else None
    url: dict = {"hostname": e.host}
    if port is not None:
        url["port"] = port
    if e.kind == "tunnel":
        url["url_string"] = f"{e.host}:{e.port}"   # a CONNECT's target is host:port (authority form), no path
    else:
        scheme = "https" if e.kind == "intercepted" else "http"
        shown = "" if (scheme, port) in (("https", 443), ("http", 80)) else f":{e.port}"
        path = e.path if e.path != "-" else ""
        url.update(scheme=scheme, url_string=f"{scheme}://{e.host}{shown}{path}", **({"path": path} if path else {}))
    found = {
        "class_uid": CLASS_UID, "class_name": CLASS_NAME, "category_uid": CATEGORY_UID, "category_name": CATEGORY_NAME,
        "activity_id": activity, "activity_name": method.title() if activity != OTHER else method,
        "type_uid": CLASS_UID * 100 + activity, "type_name": f"{CLASS_NAME}: {method.title() if activity != OTHER else method}",
        "time": e.time * 1000,
        "severity_id": severity_id, "severity": severity,
        "action_id": action_id, "action": action, "disposition_id": disposition_id, "disposition": disposition,
        "status_id": status_id, "status": status,
        "message": e.message,
        "http_request": {"http_method": method, "url": url},
        "dst_endpoint": {"hostname": e.host, **({"port": port} if port is not None else {})},
        "metadata": {"version": SCHEMA_VERSION, "product": PRODUCT, "log_name": "egress"},
        # What OCSF has no field for: Squid's own verdict, the TLS step, the decision's word.
        "unmapped": {"decision": e.decision, "kind": e.kind, "squid_verdict": e.verdict, "tls": e.tls, "sni": e.sni},
    }
    if e.status.isdigit() and int(e.status) > 0:
        found["http_response"] = {"code": int(e.status)}
        found["http_status"] = int(e.status)
    if sandbox:
        found["src_endpoint"] = {"name": sandbox}
    return found


def change_event(c: RuleChange, sandbox: str = "") -> dict:
    """One rule change as an Entity Management event: the rule is the managed entity, created (allow)
    or deleted (deny); the reason given with it is the event's comment."""
    activity, name = CHANGE_ACTIVITIES[c.action]
    found = {
        "class_uid": CHANGE_CLASS_UID, "class_name": CHANGE_CLASS_NAME,
        "category_uid": CHANGE_CATEGORY_UID, "category_name": CHANGE_CATEGORY_NAME,
        "activity_id": activity, "activity_name": name,
        "type_uid": CHANGE_CLASS_UID * 100 + activity, "type_name": f"{CHANGE_CLASS_NAME}: {name}",
        "time": c.time * 1000,
        "severity_id": 1, "severity": "Informational",
        "status_id": 1, "status": "Success",   # only a change the probe proved again is kept and logged
        "message": f"rule changed: {c.action} {c.rule}",
        "comment": c.reason,
        "entity": {"name": c.rule, "type": "egress allow rule", "type_id": ENTITY_OTHER,
                   "data": {"action": c.action, "rule": c.rule, **({"sandbox": sandbox} if sandbox else {})}},
        "metadata": {"version": SCHEMA_VERSION, "product": PRODUCT, "log_name": "egress"},
        "unmapped": {"action": c.action, "reason": c.reason},
    }
    if sandbox:
        found["device"] = {"name": sandbox, "type_id": 99, "type": "sandbox"}
    return found


def lines(events: tuple[EgressEvent, ...], sandbox: str = "", changes: tuple[RuleChange, ...] = ()) -> list[str]:
    """JSON lines, one event each, in time order (the log's order within a second; a rule change
    after the requests of its second), ASCII: whatever the agent sent stays escaped."""
    found = [(e.time, 0, event(e, sandbox)) for e in events] + [(c.time, 1, change_event(c, sandbox)) for c in changes]
    return [json.dumps(f, sort_keys=True) for _, _, f in sorted(found, key=lambda t: t[:2]) if f is not None]
