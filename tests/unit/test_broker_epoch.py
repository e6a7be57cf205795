"""Which controller requests a broker refuses as meant for an earlier registration of itself."""

from strom.controller.broker_epoch import is_stale_broker_epoch


def test_a_newcomer_accepts_the_controller_before_its_own_register_call_returned() -> None:
    # The controller saw /brokers/ids/<id> (czxid 120) before the broker learned its epoch (-1).
    assert not is_stale_broker_epoch(120, -1)


def test_an_older_registration_is_stale_and_unknown_epochs_are_accepted() -> None:
    assert is_stale_broker_epoch(100, 120)
    assert not is_stale_broker_epoch(120, 120)
    assert not is_stale_broker_epoch(-1, 120)
