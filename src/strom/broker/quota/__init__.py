"""Client quotas (Kafka's KIP-13, KIP-55, KIP-124, KIP-219): byte-rate and request-time limits per user
and client id, resolved from the client entity configs and enforced by throttling connections."""
