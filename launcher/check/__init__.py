"""What a policy stack means, with nothing run: `sandbox check`'s findings (file, key path, line) on
the stack `run` would apply, compiled the same way so that check and compile never disagree; and
`sandbox explain`: per field the mechanism, the component that enforces it and the probe check that
proves it, for each target.

May import: host, pipeline, plan, policy, targets."""
