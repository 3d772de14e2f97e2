"""Outputs: metrics exposition, alert sinks, MQTT."""
