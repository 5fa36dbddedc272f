from celery import shared_task

from reservations import services


@shared_task(ignore_result=True)
def heal_reservation(reservation_id: int) -> None:
    services.heal_reservation(reservation_id=reservation_id)


@shared_task(ignore_result=True)
def reconcile_reservations() -> dict:
    return services.reconcile_reservations()
