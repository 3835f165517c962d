"""A plan meets the engine: the library's session, launch, proof, and long-lived sandboxes."""
