"""Machinery shared by the broker and the coordinators (Kafka's ``server-common``).

Lives below both so a coordinator never imports upward into ``strom.broker``.
"""
