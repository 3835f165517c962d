"""The policy language: one file read, validated and typed; layers combined as ceilings."""
