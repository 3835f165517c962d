"""The policy language, before any host is looked at: one file (a preset name or a path) read through
a safe YAML loader, checked against the bundled schema and typed as the frozen `Policy` model; the
allow-list, secret and host-executed surface inventories it is made of; layers combined as ceilings,
field by field; the defaults set once (settings); the rules of trust on first use for a repository's
policy. Nothing here reads the environment or gathers host facts.

May import: none."""
