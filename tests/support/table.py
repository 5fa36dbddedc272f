"""How every benchmark prints its figures: a two-column table."""

from collections.abc import Sequence


def print_table(rows: Sequence[tuple[str, object]], heading: tuple[str, str] = ("figure", "value")) -> None:
    width = max(len(name) for name, _ in [heading, *rows])
    for name, value in [heading, *rows]:
        print(f"{name:<{width}}  {value}")
