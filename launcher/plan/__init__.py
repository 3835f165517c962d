"""The typed LaunchPlan, the pure compiler that makes it, and the probe's check list."""
