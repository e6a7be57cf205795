"""The controller: its event queue, partition and replica state machines, its channel to brokers."""
