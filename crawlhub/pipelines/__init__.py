"""Item pipelines: clean -> validate -> dedupe -> MongoDB."""
