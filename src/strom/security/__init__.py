"""Security: principals, listeners' protocols, authentication (TLS, SASL) and authorization (ACLs)."""
