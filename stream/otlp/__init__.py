"""OpenTelemetry input: OTLP export batches decoded, and a trace's spans read as a trace."""
