"""Copy mode: the agent works on a copy of the workspace in Docker volumes, and its changes reach the
host tree only when the user applies them after review. store.py makes, finds and drops copies and
keeps their checkpoints (through a short-lived tools container running images/tools/copytool.py, so
no host program ever reads the agent's files in place); review.py turns what changed into text;
export.py receives a checkpoint's files into a private spool, within limits.py's caps; apply.py
writes them to the host tree, branch.py to a git branch.

May import: engine, host, plan, policy."""
