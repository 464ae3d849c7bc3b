"""The Files and Batch APIs (issue 30 points 2 and 3): routes, the pure
parts (line checks, the lifecycle, the JSONL shapes) and the runner."""
