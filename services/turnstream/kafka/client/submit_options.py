"""What a Kafka session's submit variants take beside the input.

Owns :class:`SubmitOptions`, the one set of keyword arguments that
:meth:`~turnstream.kafka.client.session.KafkaSession.submit`,
``submit_to_loop``, ``submit_turn`` and ``submit_and_wait`` all accept and
pass on unchanged, and :func:`submit_fields`, the ``SubmitInput`` fields they
give. Pure: imports value types only.
"""

from __future__ import annotations

from typing import TypedDict

from turnstream.events import Agency
from turnstream.ids import CommandId

__all__ = ["SubmitOptions", "submit_fields"]


class SubmitOptions(TypedDict, total=False):
    """How to submit an input; every key optional (its default in brackets).

    Attributes:
        no_fold: never fold it into a running turn [``False``].
        agency: who asks [``Agency.USER``].
        command_id: the id to send it with [a new one]. Pass the id of an
            earlier attempt to retry it: the loop applies one command id
            once, so a retry never makes a second turn.
        agent: the agent the input is for (a new loop is bound to it) [empty:
            the service's single agent].
        model: a model from the agent's allow-list for this input's turn
            [empty: the agent's default]; outside it, ``TurnRejected``.
        max_tokens: an output cap for that turn [``None``: the agent's].
    """

    no_fold: bool
    agency: Agency
    command_id: CommandId | None
    agent: str
    model: str
    max_tokens: int | None


def submit_fields(options: SubmitOptions) -> dict[str, object]:
    """The ``SubmitInput`` fields ``options`` set, beside the message and header.

    ``agency`` and ``command_id`` are the command header's, read by the caller.
    """
    return {
        "no_fold": options.get("no_fold", False),
        "agent": options.get("agent", ""),
        "model": options.get("model", ""),
        "max_tokens": options.get("max_tokens"),
    }
