"""`sandbox check` and `sandbox explain`: a policy stack judged and explained, nothing run."""
