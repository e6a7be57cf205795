"""Web console: a browser UI over the Kafka protocol (works against any Kafka broker).

`strom console` serves it. Pages are rendered on the server (Starlette + Jinja2) and a
little hand-written JavaScript polls JSON endpoints for live numbers (lag, throughput).
Every Kafka call goes through confluent-kafka, off the event loop, with a timeout.
"""
