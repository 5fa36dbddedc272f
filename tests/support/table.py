"""How every benchmark prints its figures: a two-column table."""


def print_table(rows: list[tuple[str, object]], heading: tuple[str, str] = ("figure", "value")) -> None:
    width = max(len(name) for name, _ in [heading, *rows])
    for name, value in [heading, *rows]:
        print(f"{name:<{width}}  {value}")
