"""`sits simulate`: a discrete-event capacity simulator driving the real scheduler."""

from sits.simulate.command import add_simulate_command

__all__ = ["add_simulate_command"]
