"""What runs the checks: hypothesis, time limits, worker processes, repeatable examples."""
