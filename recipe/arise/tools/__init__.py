"""User-facing command-line tools: preflight, calibrate, evaluate, inspect_run, report, verdict."""
