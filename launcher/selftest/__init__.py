"""`sandbox selftest`: hostile cases as data, their runner and shell library, scratch workspaces, the test network."""
