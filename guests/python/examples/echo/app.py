"""Acks every delivery: the smallest handler (the Python twin of
guests/echo)."""

from rheo_handler import Ack, handler


@handler
def handle(delivery):
    return Ack()
