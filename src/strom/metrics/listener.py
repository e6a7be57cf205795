"""Moved to :mod:`strom.config.metrics_listener` (configuration is the bottom layer); kept so older imports
work."""

from strom.config.metrics_listener import parse_metrics_listener, validate_metrics_listener

__all__ = ["parse_metrics_listener", "validate_metrics_listener"]
