"""Broker metrics for Prometheus and the /healthz and /readyz probes.

Hot paths update plain counters (RequestMetrics, BrokerTopicStats); everything else
(log sizes, ISR health, purgatory sizes, group lag) is read from the broker's state only
when /metrics is scraped (BrokerCollector). MetricsEndpoint serves the HTTP side.
Names follow Kafka's JMX names as the common jmx_exporter rules turn them into
Prometheus names; docs/metrics.md lists every one.
"""
