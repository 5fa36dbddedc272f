"""Signals of the reservations app, so that it need not know who acts on them."""

from django.dispatch import Signal

# Sent inside the transaction that let a live reservation's node go, with keyword argument
# reservation_id: the reservation needs a replacement placed (heal_reservation).
reservation_lost_node = Signal()

# Sent inside the transaction that queued webhook deliveries (reservations/webhooks.py.notify),
# without arguments: they are due now.
webhook_deliveries_due = Signal()
